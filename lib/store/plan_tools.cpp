// SPDX-License-Identifier: MIT
// What launchfit-plans asks of a remote plan store (plan_tools.hpp).

#include "plan_tools.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "../settings.hpp"
#include "kv_scheme.hpp"
#include "redis_ops.hpp"

namespace launchfit::detail::plan_tools {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t max_problems = 1000;
// An exchange of a tool: as the library's (64 Ki elements, 8 MiB, no string above a value's bound + 1).
constexpr redis::reply_bounds exchange_bounds{std::size_t(64) * 1024, remote_max_value_bytes + 1,
                                              std::size_t(8) << 20};

// A key as remembered to tell a key SCAN returned twice: launchfit's keys are 49 bytes; a long foreign key
// is remembered by its head, length and hash, so that 100,000 keys of 64 KiB never cost 6 GiB.
std::string seen_form(std::string_view k) {
  if (k.size() <= 256) return std::string(k);
  return std::string(k.substr(0, 128)) + '\0' + std::to_string(k.size()) + '\0' +
         std::to_string(std::hash<std::string_view>{}(k));
}

failure from(store_failure f) {
  failure out;
  out.text = std::move(f.text);
  switch (f.kind) {
    case store_fault::none:
      out.what = failure::kind::none;
      break;
    case store_fault::timeout:
    case store_fault::io:
      out.what = failure::kind::unreachable;
      break;
    case store_fault::refused:
      out.what = failure::kind::refused;
      break;
    case store_fault::protocol:
      out.what = failure::kind::protocol;
      break;
    case store_fault::bound:
      out.what = failure::kind::bound;
      break;
  }
  return out;
}

// One command's conversation: a connection, and the command's bounds in all (time, bytes) applied to every
// exchange, before anything is read past them.
class session {
 public:
  explicit session(const store_bounds& b) : bounds_(b), deadline_(steady::now() + milliseconds(b.max_ms)) {}

  // False with `failed` set when the URL is bad or the store cannot be reached.
  bool open(const std::string& text, failure& failed) {
    std::optional<remote_url> ignored;
    return open(text, failed, ignored);
  }
  bool open(const std::string& text, failure& failed, std::optional<remote_url>& url) {
    std::string why;
    url = parse_remote_url(text, why);
    if (!url) {
      failed = {failure::kind::url, why};
      return false;
    }
    // A password kept out of the URL, as the library reads it.
    if (url->password.empty()) url->password = current_settings().remote.password;
    const auto now = steady::now();
    store_failure f;
    conn_ = connect_store(
        *url, std::min(now + milliseconds(bounds_.connect_timeout_ms), deadline_),
        std::min(now + milliseconds(bounds_.connect_timeout_ms + bounds_.op_timeout_ms), deadline_), f);
    if (!conn_) failed = from(std::move(f));
    return conn_ != nullptr;
  }

  store_failure exchange(const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
    const auto now = steady::now();
    if (now >= deadline_) return time_bound();
    const std::size_t used = conn_->received();
    if (used >= bounds_.max_bytes) return bytes_bound();
    redis::reply_bounds b = exchange_bounds;
    const bool bytes_left_bind = bounds_.max_bytes - used < b.max_bytes;
    b.max_bytes = std::min(b.max_bytes, bounds_.max_bytes - used);
    const auto own = now + milliseconds(bounds_.op_timeout_ms);
    std::string why;
    const redis::fault r = conn_->exchange(cmds, replies, std::min(own, deadline_), b, why);
    if (r == redis::fault::timeout && deadline_ < own) return time_bound();
    if (r == redis::fault::protocol && bytes_left_bind && conn_->received() - used > b.max_bytes)
      return bytes_bound();
    if (r != redis::fault::none) return {fault_of(r), why};
    return {};
  }

  store_failure keys_bound() const {
    return {store_fault::bound, "stopped at the bound of " + std::to_string(bounds_.max_keys) + " keys"};
  }

 private:
  store_failure time_bound() const {
    return {store_fault::bound, "stopped at the time bound of " + std::to_string(bounds_.max_ms) + " ms"};
  }
  store_failure bytes_bound() const {
    return {store_fault::bound,
            "stopped at the bound of " + std::to_string(bounds_.max_bytes >> 20) + " MiB of answers"};
  }

  store_bounds bounds_;
  steady::time_point deadline_;
  std::unique_ptr<redis::connection> conn_;
};

}  // namespace

std::string url_problem(const std::string& text) {
  std::string why;
  return parse_remote_url(text, why) ? std::string() : why;
}

namespace {

// The plans under `prefix` (every launchfit key when empty) through an open session; `seen` holds every key
// scanned so far (the keys bound counts them all).
void list_in(session& s, const remote_url& url, const store_bounds& bounds, const std::string& prefix,
             std::set<std::string>& seen, listing& out) {
  const auto problem = [&](const std::string& key, std::string why) {
    ++out.refused;
    if (out.problems.size() < max_problems) out.problems.push_back({key.substr(0, 1024), std::move(why)});
  };
  const std::string origin = remote_origin(url);
  bool at_key_bound = false;
  const auto wanted = [&](std::string_view k) {
    std::string remembered = seen_form(k);
    if (seen.count(remembered)) return false;
    if (seen.size() >= bounds.max_keys) {
      at_key_bound = true;
      return false;
    }
    seen.insert(std::move(remembered));
    if (!is_remote_key(k)) {
      problem(std::string(k), "not a launchfit key of this format version");
      return false;
    }
    ++out.keys;
    return true;
  };
  const auto take = [&](const std::string& k, const redis::reply& r) {
    if (r.type == redis::reply::kind::nil || (r.type == redis::reply::kind::string && r.text.empty()))
      return true;  // expired since the scan
    if (r.type != redis::reply::kind::string) {
      problem(k, "not a string value (" + redis::describe(r) + ")");
    } else if (r.text.size() > remote_max_value_bytes) {
      problem(k, "a value larger than " + std::to_string(remote_max_value_bytes) + " bytes");
    } else {
      std::string why;
      if (std::optional<stored_entry> e = parse_remote_value(r.text, k, why)) {
        e->origin = origin;
        out.entries.push_back(std::move(*e));
      } else {
        problem(k, std::move(why));
      }
    }
    return true;
  };
  const auto more = [&] { return !at_key_bound; };
  const auto exchange = [&](const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
    return s.exchange(cmds, replies);
  };
  store_failure f;
  const std::string match = prefix.empty() ? std::string(remote_key_base) : prefix;
  scan_values(exchange, match, 1000, wanted, take, more, f);
  if (!f && at_key_bound) f = s.keys_bound();
  out.failed = from(std::move(f));
}

// The tuning leases ("launchfit:lease:*"): each one's owner (GETRANGE, bounded) and time left (PTTL).
failure leases_in(session& s, const store_bounds& bounds, std::set<std::string>& seen, store_view& out) {
  constexpr std::string_view lease_base = "launchfit:lease:";
  constexpr std::size_t owner_bytes = 128;
  std::string cursor = "0";
  std::vector<redis::reply> replies;
  for (;;) {
    store_failure f =
        s.exchange({{"SCAN", cursor, "MATCH", std::string(lease_base) + "*", "COUNT", "1000"}}, replies);
    if (f) return from(std::move(f));
    const redis::reply& r = replies[0];
    if (r.type != redis::reply::kind::array || r.elements.size() != 2 ||
        r.elements[0].type != redis::reply::kind::string || r.elements[1].type != redis::reply::kind::array)
      return {failure::kind::protocol, "SCAN answered " + redis::describe(r) + ", not [cursor, keys]"};
    const std::string next = r.elements[0].text;
    if (next.empty() || next.size() > 20 || next.find_first_not_of("0123456789") != std::string::npos)
      return {failure::kind::protocol, "SCAN answered a cursor that is not a number"};
    std::vector<std::string> keys;
    for (const redis::reply& k : r.elements[1].elements) {
      if (k.type != redis::reply::kind::string)
        return {failure::kind::protocol, "SCAN answered a key that is " + redis::describe(k)};
      std::string remembered = seen_form(k.text);
      if (seen.count(remembered)) continue;
      if (seen.size() >= bounds.max_keys) return from(s.keys_bound());
      seen.insert(std::move(remembered));
      keys.push_back(k.text);
    }
    for (std::size_t at = 0; at < keys.size(); at += read_pipeline) {
      const std::size_t n = std::min(read_pipeline, keys.size() - at);
      std::vector<redis::command> cmds;
      for (std::size_t i = at; i < at + n; ++i) {
        cmds.push_back({"GETRANGE", keys[i], "0", std::to_string(owner_bytes)});
        cmds.push_back({"PTTL", keys[i]});
      }
      if (store_failure e = s.exchange(cmds, replies)) return from(std::move(e));
      for (std::size_t i = 0; i < n; ++i) {
        const redis::reply& owner = replies[2 * i];
        const redis::reply& ttl = replies[2 * i + 1];
        ++out.lease_count;
        if (out.leases.size() >= max_problems) continue;
        lease_view v;
        const std::string& k = keys[at + i];
        v.plan_key = "launchfit:" + k.substr(std::min(k.size(), lease_base.size()));
        v.owner = owner.type == redis::reply::kind::string ? owner.text : "(" + redis::describe(owner) + ")";
        v.ttl_ms = ttl.type == redis::reply::kind::integer ? ttl.integer : -2;
        out.leases.push_back(std::move(v));
      }
    }
    cursor = next;
    if (cursor == "0") return {};
  }
}

}  // namespace

listing list_entries(const std::string& url, const store_bounds& bounds, const std::string& prefix) {
  listing out;
  try {
    session s(bounds);
    std::optional<remote_url> parsed;
    if (!s.open(url, out.failed, parsed)) return out;
    std::set<std::string> seen;  // SCAN may return a key more than once; every key counts for the bound
    list_in(s, *parsed, bounds, prefix, seen, out);
  } catch (const std::exception& e) {  // out of memory: what was read is kept
    out.failed = {failure::kind::protocol, e.what()};
  }
  return out;
}

store_view view_store(const std::string& url, const store_bounds& bounds) {
  store_view out;
  try {
    session s(bounds);
    std::optional<remote_url> parsed;
    if (!s.open(url, out.plans.failed, parsed)) return out;
    std::set<std::string> seen;
    list_in(s, *parsed, bounds, "", seen, out.plans);
    if (!out.plans.failed) out.plans.failed = leases_in(s, bounds, seen, out);
  } catch (const std::exception& e) {
    out.plans.failed = {failure::kind::protocol, e.what()};
  }
  return out;
}

push_result push_entries(const std::string& url, const std::vector<stored_entry>& entries,
                         std::uint64_t ttl_s, const store_bounds& bounds) {
  push_result out;
  const auto problem = [&](std::string why) {
    ++out.refused;
    if (out.problems.size() < max_problems) out.problems.push_back(std::move(why));
  };
  try {
    session s(bounds);
    if (!s.open(url, out.failed)) return out;
    const auto exchange = [&](const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
      return s.exchange(cmds, replies);
    };
    constexpr std::size_t batch = 64;  // values of at most 64 KiB: at most 4 MiB sent per exchange
    for (std::size_t start = 0; start < entries.size(); start += batch) {
      std::vector<key_value> kvs;
      for (std::size_t i = start; i < std::min(entries.size(), start + batch); ++i) {
        const stored_entry& e = entries[i];
        std::string k = remote_key(e.key);
        const std::string label = entry_label(i, e.key);
        if (k.empty()) {
          problem(label + ": names no device model (an older writer's entry serves its own GPU only)");
          continue;
        }
        // At the largest epoch a writer may give it: a value that fits then fits at any epoch.
        const std::string value = store_value(e, max_epoch);
        if (value.size() > remote_max_value_bytes) {
          problem(label + ": " + std::to_string(value.size()) + " bytes is above the limit of " +
                  std::to_string(remote_max_value_bytes));
          continue;
        }
        kvs.push_back({std::move(k), e});
      }
      if (kvs.empty()) continue;
      write_counts counts;
      store_failure f = write_entries(exchange, kvs, ttl_s, counts);
      out.written += counts.written;
      out.present += counts.present;
      out.replaced += counts.replaced;
      out.superseded += counts.superseded;
      if (f) {
        out.failed = from(std::move(f));
        break;
      }
      for (std::size_t i = 0; i < counts.lost; ++i)
        problem("a key kept changing while it was written (other writers): left as they wrote it");
    }
  } catch (const std::exception& e) {
    out.failed = {failure::kind::protocol, e.what()};
  }
  return out;
}

std::string store_key(const stored_key& k) { return remote_key(k); }

std::uint64_t ttl_from_env(std::string& warning) {
  const settings& s = current_settings();
  for (const setting_warning& w : s.warnings)
    if (w.variable == "LAUNCHFIT_REMOTE_TTL") warning = w.message;
  return s.remote.ttl_s;
}

}  // namespace launchfit::detail::plan_tools

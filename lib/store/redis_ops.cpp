// SPDX-License-Identifier: MIT
// The plan store's conversations with Redis (redis_ops.hpp).

#include "redis_ops.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "dns.hpp"

namespace launchfit::detail {
namespace {

using redis::reply;

std::string endpoint(const remote_url& url) { return url.host + ":" + std::to_string(url.port); }

// A server's answer to AUTH as it may be shown: should it echo the password (no server of ours does), the
// password is replaced by ***. A password of fewer than 4 bytes is not searched for: it would mangle text.
std::string without_password(std::string text, const remote_url& url) {
  const std::string& pw = url.password;
  if (pw.size() < 4) return text;
  for (std::size_t at = text.find(pw); at != std::string::npos; at = text.find(pw, at + 3))
    text.replace(at, pw.size(), "***");
  return text;
}

// A SCAN reply: [cursor, [key, ...]]. False with `failure` for anything else.
bool parse_scan(const reply& r, std::string& cursor, std::vector<std::string>& keys, store_failure& failure) {
  if (r.type == reply::kind::error) {
    failure = {store_fault::refused, "SCAN failed (" + redis::describe(r) + ")"};
    return false;
  }
  if (r.type != reply::kind::array || r.elements.size() != 2 || r.elements[0].type != reply::kind::string ||
      r.elements[1].type != reply::kind::array) {
    failure = {store_fault::protocol, "SCAN answered " + redis::describe(r) + ", not [cursor, keys]"};
    return false;
  }
  const std::string& c = r.elements[0].text;
  if (c.empty() || c.size() > 20 || c.find_first_not_of("0123456789") != std::string::npos) {
    failure = {store_fault::protocol, "SCAN answered a cursor that is not a number"};
    return false;
  }
  cursor = c;
  keys.clear();
  for (const reply& k : r.elements[1].elements) {
    if (k.type != reply::kind::string) {
      failure = {store_fault::protocol, "SCAN answered a key that is " + redis::describe(k)};
      return false;
    }
    keys.push_back(k.text);
  }
  return true;
}

// Replaces the value under KEYS[1] by ARGV[1] (expiring in ARGV[2] s) only while it is what the writer
// read: a string whose first ARGV[5]+1 bytes are ARGV[4] (ARGV[3] 'string'), any other type (ARGV[3]
// 'other'), nothing (ARGV[3] 'none'); in every case also when nothing is there any more (expired or deleted
// since: as SET NX would). 1 when it replaced, 0 when the
// key changed since (another writer was first). Whether the new value should replace what was read is the
// writer's decision (better_measured(), the one rule, in C++); the script only makes the replacement atomic.
constexpr std::string_view replace_script =
    "local t = redis.call('TYPE', KEYS[1])['ok']\n"
    "if t == 'string' then\n"
    "  if ARGV[3] ~= 'string' or redis.call('GETRANGE', KEYS[1], 0, ARGV[5]) ~= ARGV[4] then return 0 end\n"
    "elseif t ~= 'none' and ARGV[3] ~= 'other' then\n"
    "  return 0\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])\n"
    "return 1\n";

// A key whose current content a writer read and found invalid.
struct stale {
  std::size_t entry = 0;       // index in the entries
  const char* was = "string";  // "string" (`seen` its first bytes), "other" (another type), "none"
  std::string seen;
};

}  // namespace

namespace redis {

std::string describe(const reply& r) {
  switch (r.type) {
    case reply::kind::string:
      return "a string of " + std::to_string(r.text.size()) + " bytes";
    case reply::kind::array:
      return "an array of " + std::to_string(r.elements.size());
    case reply::kind::integer:
      return "the integer " + std::to_string(r.integer);
    case reply::kind::nil:
      return "nil";
    case reply::kind::status:
    case reply::kind::error:
      return (r.type == reply::kind::error ? "error: " : "status: ") +
             std::string(std::string_view(r.text).substr(0, 512));
  }
  return "a reply";
}

}  // namespace redis

store_fault fault_of(redis::fault f) noexcept {
  switch (f) {
    case redis::fault::none:
      return store_fault::none;
    case redis::fault::timeout:
      return store_fault::timeout;
    case redis::fault::io:
      return store_fault::io;
    case redis::fault::protocol:
      return store_fault::protocol;
  }
  return store_fault::protocol;
}

layer_failure layer_failure_of(store_fault f) noexcept {
  switch (f) {
    case store_fault::none:
      return layer_failure::none;
    case store_fault::timeout:
      return layer_failure::timeout;
    case store_fault::io:
      return layer_failure::io;
    case store_fault::protocol:
    case store_fault::refused:  // an error reply (WRONGTYPE, NOAUTH): no store of launchfit's answers that
    case store_fault::bound:
      return layer_failure::protocol;
  }
  return layer_failure::protocol;
}

std::unique_ptr<redis::connection> connect_store(const remote_url& url,
                                                 redis::clock::time_point connect_deadline,
                                                 redis::clock::time_point op_deadline,
                                                 store_failure& failure) {
  if (!redis::unavailable().empty()) {
    failure = {store_fault::io, redis::unavailable()};
    return nullptr;
  }
  std::string why;
  const std::optional<std::string> address = resolve_within(url.host, connect_deadline, why);
  std::unique_ptr<redis::connection> c;
  if (address) c = redis::connection::open(*address, url.port, connect_deadline, why);
  if (!c) {
    failure = {store_fault::io, "cannot connect to " + endpoint(url) + ": " + why};
    return nullptr;
  }
  // AUTH first: a server with requirepass or ACL users answers nothing else (NOAUTH) before it.
  if (!url.password.empty() || !url.user.empty()) {
    if (url.password.empty()) {
      failure = {store_fault::refused, "the URL names user '" + url.user +
                                           "' but no password (in the URL, LAUNCHFIT_REDIS_PASSWORD or "
                                           "LAUNCHFIT_REDIS_PASSWORD_FILE)"};
      return nullptr;
    }
    std::vector<reply> r;
    redis::command auth = url.user.empty() ? redis::command{"AUTH", url.password}
                                           : redis::command{"AUTH", url.user, url.password};
    const redis::fault f = c->exchange({std::move(auth)}, r, op_deadline, {}, why);
    if (f != redis::fault::none) {
      failure = {fault_of(f), without_password(why, url)};
      return nullptr;
    }
    if (r[0].type != reply::kind::status) {
      failure = {store_fault::refused, "AUTH" +
                                           (url.user.empty() ? std::string() : " as '" + url.user + "'") +
                                           " failed (" + without_password(redis::describe(r[0]), url) + ")"};
      return nullptr;
    }
  }
  if (url.db != 0) {
    std::vector<reply> r;
    const redis::fault f = c->exchange({{"SELECT", std::to_string(url.db)}}, r, op_deadline, {}, why);
    if (f != redis::fault::none) {
      failure = {fault_of(f), why};
      return nullptr;
    }
    if (r[0].type != reply::kind::status) {
      failure = {store_fault::refused,
                 "SELECT " + std::to_string(url.db) + " failed (" + redis::describe(r[0]) + ")"};
      return nullptr;
    }
  }
  return c;
}

redis::command read_value_command(const std::string& key) {
  return {"GETRANGE", key, "0", std::to_string(remote_max_value_bytes)};
}

bool scan_values(const redis_exchange& exchange, const std::string& prefix, std::size_t page_hint,
                 const std::function<bool(std::string_view)>& wanted,
                 const std::function<bool(const std::string&, const redis::reply&)>& take,
                 const std::function<bool()>& more, store_failure& failure) {
  std::string cursor = "0";
  std::vector<reply> replies;
  std::vector<std::string> keys, names;
  std::vector<redis::command> reads;
  for (;;) {
    if (!more()) return false;
    failure =
        exchange({{"SCAN", cursor, "MATCH", prefix + "*", "COUNT", std::to_string(page_hint)}}, replies);
    if (failure || !parse_scan(replies[0], cursor, keys, failure)) return false;
    names.clear();
    for (auto& k : keys)
      if (wanted(k)) names.push_back(std::move(k));
    for (std::size_t at = 0; at < names.size(); at += read_pipeline) {
      if (!more()) return false;
      const std::size_t n = std::min(read_pipeline, names.size() - at);
      reads.clear();
      for (std::size_t i = at; i < at + n; ++i) reads.push_back(read_value_command(names[i]));
      if ((failure = exchange(reads, replies))) return false;
      for (std::size_t i = 0; i < n; ++i)
        if (!take(names[at + i], replies[i])) return false;
    }
    if (cursor == "0") return true;
  }
}

std::string store_value(const stored_entry& e, std::uint64_t epoch) {
  stored_entry v = e;
  v.origin.clear();
  v.epoch = epoch;
  return remote_value(v);
}

store_failure write_entries(const redis_exchange& exchange, const std::vector<key_value>& entries,
                            std::uint64_t ttl_s, write_counts& counts) {
  const std::string ttl = std::to_string(ttl_s);
  std::vector<redis::command> cmds;
  std::vector<reply> replies;
  std::size_t settled = 0;  // entries written, found as good, replaced or given up: the rest are lost
  const auto failed = [&](store_failure f) {
    counts.lost += entries.size() - settled;
    return f;
  };
  std::vector<std::size_t> sent;  // the entries of cmds, in order
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string value = store_value(entries[i].entry, 0);
    if (value.size() > remote_max_value_bytes) {  // never stored: too large to be read back
      ++counts.lost;
      ++settled;
      continue;
    }
    cmds.push_back({"SET", entries[i].key, std::move(value), "NX", "EX", ttl});
    sent.push_back(i);
  }
  if (cmds.empty()) return {};
  if (store_failure f = exchange(cmds, replies)) return failed(std::move(f));
  std::vector<std::size_t> taken;  // keys that held something: to be read and compared
  for (std::size_t j = 0; j < sent.size(); ++j) {
    if (replies[j].type == reply::kind::status) {
      ++counts.written;
      ++settled;
    } else if (replies[j].type == reply::kind::nil) {
      taken.push_back(sent[j]);
    } else {  // OOM, READONLY, NOAUTH: the store refuses writes
      return failed({store_fault::refused, "SET answered " + redis::describe(replies[j])});
    }
  }
  for (int round = 0; round < write_rounds && !taken.empty(); ++round) {
    cmds.clear();
    for (const std::size_t i : taken) cmds.push_back(read_value_command(entries[i].key));
    if (store_failure f = exchange(cmds, replies)) return failed(std::move(f));
    std::vector<stale> swaps;  // keys to replace, compare-and-set
    std::vector<bool> improving;
    std::vector<std::string> values;
    for (std::size_t j = 0; j < taken.size(); ++j) {
      const std::size_t i = taken[j];
      const reply& r = replies[j];
      std::string why;
      if (r.type == reply::kind::nil) {  // expired or deleted since SET NX: as an invalid value, replaced
        swaps.push_back({i, "none", {}});
        improving.push_back(false);
        values.push_back(store_value(entries[i].entry, 0));
      } else if (r.type == reply::kind::string) {
        const std::optional<stored_entry> there = parse_remote_value(r.text, entries[i].key, why);
        if (!there) {
          swaps.push_back({i, "string", r.text});
          improving.push_back(false);
          values.push_back(store_value(entries[i].entry, 0));
        } else if (better_measured(entries[i].entry.measurement, there->measurement)) {
          std::string value = store_value(entries[i].entry, std::min(there->epoch + 1, max_epoch));
          if (value.size() > remote_max_value_bytes) {
            ++counts.lost;
            ++settled;
            continue;
          }
          swaps.push_back({i, "string", r.text});
          improving.push_back(true);
          values.push_back(std::move(value));
        } else {
          ++counts.present;
          ++settled;
        }
      } else if (r.type == reply::kind::error && r.text.rfind("WRONGTYPE", 0) == 0) {
        swaps.push_back({i, "other", {}});
        improving.push_back(false);
        values.push_back(store_value(entries[i].entry, 0));
      } else {
        return failed({store_fault::refused, "GETRANGE answered " + redis::describe(r)});
      }
    }
    taken.clear();
    if (swaps.empty()) break;
    cmds.clear();
    for (std::size_t j = 0; j < swaps.size(); ++j) {
      const stale& s = swaps[j];
      cmds.push_back({"EVAL", std::string(replace_script), "1", entries[s.entry].key, values[j], ttl, s.was,
                      s.seen, std::to_string(remote_max_value_bytes)});
    }
    if (store_failure f = exchange(cmds, replies)) return failed(std::move(f));
    for (std::size_t j = 0; j < swaps.size(); ++j) {
      const reply& r = replies[j];
      if (r.type == reply::kind::integer && r.integer == 1) {
        ++(improving[j] ? counts.superseded : counts.replaced);
        ++settled;
      } else if (r.type == reply::kind::integer && r.integer == 0) {
        taken.push_back(swaps[j].entry);  // changed since it was read: read it again, compare again
      } else {  // NOSCRIPT cannot happen with EVAL; an error here is the server's (ACL, OOM, no scripting)
        return failed({store_fault::refused, "EVAL answered " + redis::describe(r)});
      }
    }
  }
  counts.lost += taken.size();
  return {};
}

store_failure refresh_ttls(const redis_exchange& exchange, const std::vector<std::string>& keys,
                           std::uint64_t ttl_s, std::size_t& refreshed) {
  if (keys.empty()) return {};
  const std::string ttl = std::to_string(ttl_s);
  std::vector<redis::command> cmds;
  cmds.reserve(keys.size());
  for (const auto& k : keys) cmds.push_back({"EXPIRE", k, ttl});
  std::vector<reply> replies;
  if (store_failure f = exchange(cmds, replies)) return f;
  for (const reply& r : replies) {
    if (r.type != reply::kind::integer)
      return {store_fault::refused, "EXPIRE answered " + redis::describe(r)};
    if (r.integer == 1) ++refreshed;
  }
  return {};
}

}  // namespace launchfit::detail

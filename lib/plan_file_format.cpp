// SPDX-License-Identifier: MIT
// The plan file's format: entries to and from JSON, the document around them, and the one validation of a
// stored entry. Pure functions of their input: no file system, no shared state (fuzzed).

#include "plan_file_format.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "launch_options.hpp"
#include "plan_json.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

using nlohmann::json;

struct bad_entry : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string key_text(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw bad_entry(std::string("missing '") + key + "'");
  if (!it->is_string()) throw bad_entry(std::string("'") + key + "' is not a string");
  const auto& s = it->get_ref<const std::string&>();
  // Refused, not cleaned: a cleaned key could match another kernel's.
  if (!is_clean_text(s, max_key_text_bytes)) {
    throw bad_entry(std::string("'") + key + "' is too long or holds control characters");
  }
  return s;
}

template <class T>
T key_int(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw bad_entry(std::string("missing '") + key + "'");
  if (!it->is_number_integer()) throw bad_entry(std::string("'") + key + "' is not an integer");
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!it->is_number_unsigned()) throw bad_entry(std::string("'") + key + "' is not in range");
    return it->template get<std::uint64_t>();
  } else {
    const auto i = it->template get<std::int64_t>();
    if (it->is_number_unsigned() && it->template get<std::uint64_t>() > std::uint64_t(INT_MAX)) {
      throw bad_entry(std::string("'") + key + "' is not in range");
    }
    if (i < 0 || i > INT_MAX) throw bad_entry(std::string("'") + key + "' is not in range");
    return static_cast<T>(i);
  }
}

// The entry's shape and ranges; what it means (validate_stored_entry) is checked by the caller.
stored_entry parse_entry(const json& e) {
  if (!e.is_object()) throw bad_entry("entry is not an object");
  stored_entry out;
  const auto k = e.find("key");
  if (k == e.end() || !k->is_object()) throw bad_entry("'key' is not an object");
  out.key.device_uuid = key_text(*k, "device_uuid");
  out.key.cc = key_int<int>(*k, "cc");
  out.key.sm_count = key_int<int>(*k, "sm_count");
  out.key.driver_version = key_int<int>(*k, "driver_version");
  out.key.kernel = key_text(*k, "kernel");
  out.key.policy = key_text(*k, "policy");
  out.key.smem_rule = key_text(*k, "smem_rule");
  out.key.bucket = key_int<std::uint64_t>(*k, "bucket");
  // The device model: absent in entries of older writers (then used for their own GPU only).
  if (k->contains("device_name")) out.key.device_name = key_text(*k, "device_name");
  if (k->contains("l2_bytes")) out.key.l2_bytes = key_int<std::uint64_t>(*k, "l2_bytes");
  const auto p = e.find("plan");
  if (p == e.end() || !p->is_object()) throw bad_entry("'plan' is not an object");
  out.plan = plan_from_json(*p);
  if (const auto c = e.find("calibration"); c != e.end()) {
    if (out.key.kernel != calibration_kernel || !c->is_object())
      throw bad_entry("'calibration' out of place");
    const auto b = key_int<std::uint64_t>(*c, "bytes_in_flight_per_sm");
    if (b < min_calibration_bytes_per_sm || b > max_calibration_bytes_per_sm)
      throw bad_entry("'bytes_in_flight_per_sm' is not in 512 B..4 MiB");
    out.bytes_in_flight_per_sm = b;
  } else if (out.key.kernel == calibration_kernel) {
    throw bad_entry("a calibration entry without 'calibration'");
  }
  if (const auto t = e.find("stored_at"); t != e.end()) {
    if (!t->is_number_unsigned() || t->get<std::uint64_t>() > (std::uint64_t(1) << 53)) {
      throw bad_entry("'stored_at' is not a time in milliseconds");
    }
    out.stored_at_ms = t->get<std::uint64_t>();
  }
  return out;
}

json entry_json(const stored_entry& e) {
  const stored_key& k = e.key;
  json plan = plan_to_json(e.plan);
  plan.erase("match");  // never read back: the reader says where a plan came from
  json out = {{"key",
               {{"device_uuid", k.device_uuid},
                {"cc", k.cc},
                {"sm_count", k.sm_count},
                {"driver_version", k.driver_version},
                {"kernel", k.kernel},
                {"policy", k.policy},
                {"smem_rule", k.smem_rule},
                {"bucket", k.bucket},
                {"device_name", k.device_name},
                {"l2_bytes", k.l2_bytes}}},
              {"plan", std::move(plan)},
              {"stored_at", e.stored_at_ms}};
  if (e.bytes_in_flight_per_sm > 0)
    out["calibration"] = {{"bytes_in_flight_per_sm", e.bytes_in_flight_per_sm}};
  return out;
}

// One document's entry: parsed, then validated. A validation failure is a refusal (the entry was read
// whole, and it lies about its launch); anything else is a bad entry.
enum class entry_result { ok, bad, refused };

entry_result read_entry(const json& j, std::size_t index, stored_entry& out, std::string& why) {
  try {
    out = parse_entry(j);
  } catch (const std::exception& e) {  // bad_entry, or a nlohmann type error we did not foresee
    why = "entry " + std::to_string(index) + ": " + e.what();
    return entry_result::bad;
  }
  const std::string refused = validate_stored_entry(out);
  if (refused.empty()) return entry_result::ok;
  why = entry_label(index, out.key) + ": " + refused;
  return entry_result::refused;
}

// One entry per line between these: compact, yet readable and diffable.
const std::string& file_head() {
  static const std::string head = std::string("{\"format\": \"") + cache_file_format +
                                  "\", \"version\": " + std::to_string(cache_file_version) +
                                  ", \"entries\": [\n";
  return head;
}
constexpr std::string_view file_tail = "]}\n";

}  // namespace

std::string implausible_calibration(std::uint64_t bytes, const device_limits& dev) {
  std::uint64_t most = max_calibration_bytes_per_sm;
  if (dev.regs_per_sm > 0 && dev.smem_per_sm_bytes > 0)
    most = std::min<std::uint64_t>(most, std::uint64_t(dev.regs_per_sm) * 4 + dev.smem_per_sm_bytes);
  if (bytes >= min_calibration_bytes_per_sm && bytes <= most) return {};
  return "a target of " + std::to_string(bytes) + " B in flight per SM is not in " +
         std::to_string(min_calibration_bytes_per_sm) + ".." + std::to_string(most) +
         " B (four warps of 4-byte loads .. every byte of an SM's registers and shared memory on " +
         escape_text(dev.name.empty() ? dev.arch() : dev.name, 64) + ")";
}

std::string validate_stored_entry(const stored_entry& e) {
  const stored_key& k = e.key;
  // The parser refuses these already; an entry built elsewhere (a remote store) is held to the same.
  const std::pair<const char*, const std::string*> texts[] = {{"device_uuid", &k.device_uuid},
                                                              {"kernel", &k.kernel},
                                                              {"policy", &k.policy},
                                                              {"smem_rule", &k.smem_rule},
                                                              {"device_name", &k.device_name}};
  for (const auto& [name, text] : texts) {
    if (!is_clean_text(*text, max_key_text_bytes))
      return std::string("'") + name + "' is too long or holds control characters";
  }
  if (k.kernel == calibration_kernel) {
    // A calibration holds a target, not a plan that is launched: its plan is never read.
    if (e.bytes_in_flight_per_sm < min_calibration_bytes_per_sm ||
        e.bytes_in_flight_per_sm > max_calibration_bytes_per_sm)
      return "'bytes_in_flight_per_sm' is not in 512 B..4 MiB";
    // Its key names the device's compute capability: at most what an SM of that architecture holds.
    device_limits arch;
    try {
      arch = device_limits::for_arch(std::to_string(k.cc));
    } catch (const std::exception&) {
      return {};  // an architecture the table does not know: the bounds above only
    }
    return implausible_calibration(e.bytes_in_flight_per_sm, arch);
  }
  if (e.bytes_in_flight_per_sm != 0) return "'calibration' out of place";
  std::optional<stored_key_text> key = parse_key_text(k.policy);
  if (!key) {
    return "the key's policy text '" + escape_text(k.policy, 200) +
           "' is not a policy followed by launch-option words (cooperative, cluster=XxYxZ, pdl, waves=, blocks=, "
           "rows=32, sms=, family=)";
  }
  // The smem rule is a launch option held in its own key field: fixed bytes bind the plan's smem.
  if (const auto bytes = fixed_smem_of(k.smem_rule)) {
    key->options.smem_bytes = *bytes;
  } else if (k.smem_rule.compare(0, 3, "fn=") == 0 && k.smem_rule.size() > 3) {
    key->options.smem_rule = 1;  // a rule of the block size: its answer is checked at launch
  } else {
    return "the key's smem rule '" + escape_text(k.smem_rule, 200) + "' is neither bytes=N nor fn=ID";
  }
  // Which stored plan a launch may use is decided by its key alone: a plan that launches otherwise than its
  // key says would add or drop what a launch requires.
  const std::string& said = e.plan.policy;
  if (said.size() + 4 > max_plan_text_bytes && said.size() < key->policy.size() &&
      key->policy.compare(0, said.size(), said) == 0) {
    // A policy text that long was cut when the plan was read (at a character boundary): its start is the
    // key's.
    plan whole = e.plan;
    whole.policy = key->policy;
    return stored_plan_mismatch(*key, whole);
  }
  return stored_plan_mismatch(*key, e.plan);
}

std::string entry_label(std::size_t index, const stored_key& key) {
  const std::string_view kernel = key.kernel;
  return "entry " + std::to_string(index) + " (kernel " +
         escape_text(kernel.substr(0, kernel.find('|')), 200) + ")";
}

cache_file_contents parse_cache_file(std::string_view text) {
  cache_file_contents out;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return out;  // empty: a new file
  const bool mentions_format = text.find(cache_file_format) != std::string_view::npos;
  // nlohmann::json stops at a NUL byte and ignores the rest; crashes leave zero-filled blocks behind.
  const bool has_nul = text.find('\0') != std::string_view::npos;
  const json doc =
      has_nul ? json(json::value_t::discarded) : json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) {
    // Ours if it names our format (a truncated launchfit file): replaceable. Otherwise leave it alone.
    out.status = mentions_format ? cache_file_status::corrupt : cache_file_status::foreign;
    out.problem = mentions_format ? "not valid JSON (truncated?)" : "not a launchfit plan cache (not JSON)";
    return out;
  }
  const auto format = doc.is_object() ? doc.find("format") : doc.end();
  if (!doc.is_object() || format == doc.end() || *format != cache_file_format) {
    out.status = cache_file_status::foreign;
    out.problem = "not a launchfit plan cache (no \"format\": \"launchfit-plan-cache\")";
    return out;
  }
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || *version != cache_file_version) {
    out.status = cache_file_status::wrong_version;
    out.problem = "format version " + (version == doc.end() ? std::string("missing") : version->dump()) +
                  ", this launchfit reads version " + std::to_string(cache_file_version);
    return out;
  }
  const auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) {
    out.status = cache_file_status::corrupt;
    out.problem = "\"entries\" is not an array";
    return out;
  }
  out.status = cache_file_status::ok;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    stored_entry e;
    std::string why;
    const entry_result r = read_entry((*entries)[i], i, e, why);
    if (r == entry_result::ok) {
      out.entries.push_back(std::move(e));
      continue;
    }
    if (r == entry_result::refused && out.refused++ < cache_file_max_problems) out.refusals.push_back(why);
    if (out.problems.size() < cache_file_max_problems) out.problems.push_back(why);
    if (out.skipped++ == 0) out.problem = std::move(why);
  }
  return out;
}

std::string cache_file_line(const stored_entry& e) {
  return entry_json(e).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string serialize_cache_file(const std::vector<stored_entry>& entries) {
  std::string out = file_head();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out += cache_file_line(entries[i]);
    out += i + 1 < entries.size() ? ",\n" : "\n";
  }
  out += file_tail;
  return out;
}

bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out) {
  const std::string& head = file_head();
  if (text.size() < head.size() + file_tail.size() || text.compare(0, head.size(), head) != 0 ||
      text.compare(text.size() - file_tail.size(), file_tail.size(), file_tail) != 0) {
    return false;
  }
  std::string_view body = text.substr(head.size(), text.size() - head.size() - file_tail.size());
  while (!body.empty()) {
    const std::size_t end = body.find('\n');
    if (end == std::string_view::npos) return false;
    std::string_view line = body.substr(0, end);
    body.remove_prefix(end + 1);
    const bool last = body.empty();
    if (last == (!line.empty() && line.back() == ',')) return false;  // a comma on all lines but the last
    if (!last) line.remove_suffix(1);
    if (known && known(line)) continue;
    stored_entry e;
    if (!parse_stored_entry(line, e).empty()) return false;
    out.push_back(std::move(e));
  }
  return true;
}

std::string parse_stored_entry(std::string_view json_text, stored_entry& out) {
  if (json_text.find('\0') != std::string_view::npos) return "holds a NUL byte";
  const json entry = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (entry.is_discarded()) return "not valid JSON";
  std::string why;
  return read_entry(entry, 0, out, why) == entry_result::ok ? std::string() : why;
}

}  // namespace detail

std::string kernel_fingerprint(const kernel_resources& k) {
  std::ostringstream os;
  os << k.name << '|' << k.regs_per_thread << '|' << k.static_smem_bytes << '|' << k.local_bytes_per_thread
     << '|' << k.max_threads_per_block << '|' << k.ptx_version << '|' << k.binary_version;
  return os.str();
}

stored_key stored_key_for(const device_limits& dev, int driver_version, const kernel_resources& kernel,
                          std::string policy, std::string smem_rule, std::uint64_t bucket) {
  stored_key k;
  k.device_uuid = dev.uuid;
  k.cc = dev.cc();
  k.sm_count = dev.sm_count;
  k.driver_version = driver_version;
  k.kernel = kernel_fingerprint(kernel);
  k.policy = std::move(policy);
  k.smem_rule = std::move(smem_rule);
  k.bucket = bucket;
  // Cleaned so the entry reads back (the reader refuses control characters in key text).
  k.device_name = detail::sanitize_text(dev.name, 256);
  k.l2_bytes = dev.l2_bytes;
  return k;
}

bool compatible_driver(int stored_version, int wanted_version) noexcept {
  return stored_version > 0 && wanted_version > 0 && stored_version / 1000 == wanted_version / 1000;
}

namespace {

bool is_mig(const stored_key& k) {
  return k.device_uuid.rfind("MIG-", 0) == 0 || k.device_name.find(" MIG ") != std::string::npos;
}

}  // namespace

bool same_device_model(const stored_key& stored, const stored_key& wanted) noexcept {
  return !stored.device_name.empty() && stored.device_name == wanted.device_name && stored.cc == wanted.cc &&
         stored.sm_count == wanted.sm_count && stored.l2_bytes == wanted.l2_bytes &&
         is_mig(stored) == is_mig(wanted) && compatible_driver(stored.driver_version, wanted.driver_version);
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// The plan file's format: entries to and from JSON, the document around them, and the one validation of a
// stored entry. Pure functions of their input: no file system, no shared state (fuzzed).

#include "plan_file_format.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "launch_options.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "plan_json.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

using nlohmann::json;

// An untrusted value as a log or report shows it: a number, string, bool or null as JSON (at most 64 bytes),
// anything else by its type. Never dump() of a nested value: nlohmann's dump() recurses, and a file or a store
// value of 100,000 nested brackets overflowed the stack of every process reading it.
std::string value_shown(const json& v) {
  if (!v.is_primitive()) return std::string(v.is_array() ? "an array" : "an object");
  // JSON's escapes cover C0 controls only: bidi overrides and C1 controls of a string are escaped too, and the
  // text is cut at a character boundary.
  return escape_line(v.dump(-1, ' ', false, json::error_handler_t::replace), 64);
}

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

// Why an origin text is not one a writer gives, or "": bounded clean text that holds no credentials.
std::string invalid_origin(const std::string& o) {
  if (!is_clean_text(o, max_origin_bytes))
    return "'origin' is longer than " + std::to_string(max_origin_bytes) +
           " bytes or holds control characters";
  if (o.find('@') != std::string::npos) return "'origin' names a user or password";
  return {};
}

double measurement_number(const json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end()) throw bad_entry(std::string("'measurement' without '") + key + "'");
  if (!it->is_number()) throw bad_entry(std::string("'measurement.") + key + "' is not a number");
  return it->get<double>();
}

// The shape; the ranges are invalid_measurement()'s (validate_stored_entry() says them again).
plan_measurement parse_measurement(const json& m) {
  if (!m.is_object()) throw bad_entry("'measurement' is not an object");
  plan_measurement out;
  out.best_ms = measurement_number(m, "time_ms");
  out.spread = measurement_number(m, "spread");
  const auto t = m.find("trials");
  if (t == m.end() || !t->is_number_unsigned() || t->get<std::uint64_t>() > measurement_max_trials)
    throw bad_entry("'measurement.trials' is not a count in 1.." + std::to_string(measurement_max_trials));
  out.trials = static_cast<std::uint32_t>(t->get<std::uint64_t>());
  const auto c = m.find("clean");
  if (c == m.end() || !c->is_boolean()) throw bad_entry("'measurement.clean' is not true or false");
  out.clean = c->get<bool>();
  if (const auto w = m.find("conditions"); w != m.end()) {
    if (!w->is_string()) throw bad_entry("'measurement.conditions' is not a string");
    out.conditions = w->get<std::string>();
  }
  if (const std::string why = invalid_measurement(out); !why.empty()) throw bad_entry(why);
  return out;
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
  // Added within version 1: absent in entries of older writers (an unmeasured plan, epoch 0, made here).
  if (const auto m = e.find("measurement"); m != e.end()) out.measurement = parse_measurement(*m);
  if (const auto t = e.find("epoch"); t != e.end()) {
    if (!t->is_number_unsigned() || t->get<std::uint64_t>() > max_epoch)
      throw bad_entry("'epoch' is not a count in 0..2^53");
    out.epoch = t->get<std::uint64_t>();
  }
  if (const auto o = e.find("origin"); o != e.end()) {
    if (!o->is_string()) throw bad_entry("'origin' is not a string");
    out.origin = o->get<std::string>();
    if (const std::string why = invalid_origin(out.origin); !why.empty()) throw bad_entry(why);
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
  // Written only when there is something to say, so that an entry without them reads as before.
  if (e.measurement) {
    const plan_measurement& m = *e.measurement;
    out["measurement"] = {{"time_ms", m.best_ms},
                          {"spread", m.spread},
                          {"trials", m.trials},
                          {"clean", m.clean},
                          {"conditions", m.conditions}};
  }
  if (e.epoch > 0) out["epoch"] = e.epoch;
  if (!e.origin.empty()) out["origin"] = e.origin;
  return out;
}

// One document's entry: parsed, then validated, then its stored_at bounded. A validation failure is a
// refusal (the entry was read whole, and it lies about its launch); anything else is a bad entry. A stamp
// beyond the skew is `clamped`: the entry is kept and `why` says what was not believed.
enum class entry_result { ok, clamped, bad, refused };

std::uint64_t clock_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// "7 minutes", "3 hours", "104249 days".
std::string duration_text(std::uint64_t ms) {
  const std::uint64_t minutes = ms / 60000;
  if (minutes < 120) return std::to_string(minutes) + " minutes";
  if (minutes < 48 * 60) return std::to_string(minutes / 60) + " hours";
  return std::to_string(minutes / (24 * 60)) + " days";
}

// Every clamp of this process; a plain atomic: nothing to destroy at exit while a writer thread reads.
std::atomic<std::uint64_t> stamps_cleared{0};

entry_result read_entry(const json& j, std::size_t index, stored_entry& out, std::string& why) {
  try {
    out = parse_entry(j);
  } catch (const std::exception& e) {  // bad_entry, or a nlohmann type error we did not foresee
    why = "entry " + std::to_string(index) + ": " + e.what();
    return entry_result::bad;
  }
  const std::string refused = validate_stored_entry(out);
  if (!refused.empty()) {
    why = entry_label(index, out.key) + ": " + refused;
    return entry_result::refused;
  }
  // The stamp only orders entries (the newest wins a ranking, a pull and a merge): its plan passed every
  // check above, so a stamp from the future costs the entry its precedence, not its plan. Refusing it would
  // drop good plans whenever a reader's clock runs behind a writer's; clamping it to the reader's "now"
  // would not end the lie, since a stamp at rest (a value in a store, a frozen file, a file no process
  // rewrites) would be read as the newest again by every later reader. 0, "unknown", is a fixed point: the
  // entry ranks below every dated one, wherever and whenever it is read, and is written back as 0.
  const std::uint64_t now = clock_ms();
  if (out.stored_at_ms > now && out.stored_at_ms - now > max_stored_at_skew_ms) {
    why = entry_label(index, out.key) + ": 'stored_at' " + std::to_string(out.stored_at_ms) + " is " +
          duration_text(out.stored_at_ms - now) + " ahead of this clock (more than the " +
          duration_text(max_stored_at_skew_ms) +
          " of skew allowed): read as of unknown age, below every dated entry";
    out.stored_at_ms = 0;
    return entry_result::clamped;
  }
  return entry_result::ok;
}

// One entry's JSON text (any layout) through read_entry().
entry_result read_entry_text(std::string_view json_text, stored_entry& out, std::string* why = nullptr) {
  std::string ignored;
  std::string& says = why ? *why : ignored;
  if (json_text.find('\0') != std::string_view::npos) {
    says = "holds a NUL byte";
    return entry_result::bad;
  }
  const json entry = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (entry.is_discarded()) {
    says = "not valid JSON";
    return entry_result::bad;
  }
  return read_entry(entry, 0, out, says);
}

// One entry per line between these: compact, yet readable and diffable. A constant, never a function-local
// static string: the file's writer runs on the background thread, which may still be writing while exit()
// destroys statics (a destroyed head once put 16 bytes of heap garbage at the start of every plan file).
constexpr std::string_view file_head =
    "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [\n";
static_assert(file_head.substr(12, 20) == std::string_view(cache_file_format) && cache_file_version == 1,
              "file_head spells the format and version of plan_file_format.hpp");
constexpr std::string_view file_tail = "]}\n";

// arch_limits()'s memory, by compute capability: zero-initialised before any code runs (no guard a fork could
// leave held), never destroyed (trivially), each limits made once and never freed (a lookup may run while
// statics are destroyed at exit).
std::atomic<const device_limits*> arch_by_cc[256]{};
// What arch_by_cc holds for an architecture the table does not know (its address only).
const char unknown_arch_mark = 0;
const device_limits* unknown_arch() noexcept { return reinterpret_cast<const device_limits*>(&unknown_arch_mark); }

// Sets `out` to device_limits::for_arch(cc); false for an architecture its table does not know. Every lookup
// of a plan store validates what it finds, so the limits of a compute capability below 256 are made once
// (lock-free). A key's cc is untrusted: others are made each time.
bool arch_limits(int cc, device_limits& out) {
  std::atomic<const device_limits*>* const by_cc = arch_by_cc;
  const bool remembered = cc >= 0 && cc < 256;
  if (remembered) {
    if (const device_limits* known = by_cc[cc].load(std::memory_order_acquire)) {
      if (known == unknown_arch()) return false;
      out = *known;
      return true;
    }
  }
  const device_limits* made = unknown_arch();
  try {
    made = new device_limits(device_limits::for_arch(std::to_string(cc)));
  } catch (const error&) {
  }
  const bool known = made != unknown_arch();
  if (known) out = *made;
  const device_limits* expected = nullptr;
  if (!remembered || !by_cc[cc].compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    if (known) delete made;  // another thread remembered it first, or not remembered
  }
  return known;
}

// What a plan entry states of itself, checked without the live kernel (validate_stored_entry()).
std::string inconsistent_plan(const stored_entry& e) {
  const stored_key& k = e.key;
  const plan& p = e.plan;
  const std::optional<kernel_resources> kernel = kernel_from_fingerprint(k.kernel);
  if (!kernel) {
    return "the key's kernel '" + escape_text(k.kernel, 200) +
           "' is not a kernel fingerprint (name|registers|static smem|local bytes|max threads|ptx|binary "
           "version, each in range)";
  }
  if (k.sm_count < 1)
    return "the key's sm_count is " + std::to_string(k.sm_count) + " (a GPU has at least one SM)";
  if (p.block.x == 0 || p.block.y == 0 || p.block.z == 0)
    return "the entry's plan has block " + p.block.to_string() + ": a dimension of 0 threads";
  const unsigned long long threads = p.block.count();
  if (threads > 1024)
    return "the entry's plan has block " + p.block.to_string() + " of " + std::to_string(threads) +
           " threads, above the 1024 of any GPU";
  if (p.block_threads < 0 || static_cast<unsigned long long>(p.block_threads) != threads)
    return "the entry's plan says block_threads " + std::to_string(p.block_threads) + " for block " +
           p.block.to_string() + " of " + std::to_string(threads) + " threads";
  // The fingerprint is the kernel's, recorded when the plan was made: a launch finds the entry only under
  // the fingerprint of the kernel it launches (the planner checks the live kernel again).
  if (threads > static_cast<unsigned long long>(kernel->max_threads_per_block))
    return "the entry's plan has a block of " + std::to_string(threads) + " threads, above the " +
           std::to_string(kernel->max_threads_per_block) +
           " its key's kernel allows (its maxThreadsPerBlock: __launch_bounds__ or register use)";
  if (p.blocks_per_sm < 0) return "the entry's plan has blocks_per_sm " + std::to_string(p.blocks_per_sm);
  query q;
  // An architecture the table does not know (a newer GPU): the format's bounds only.
  if (!arch_limits(k.cc, q.device)) return {};
  const device_limits& arch = q.device;
  const auto on = [&arch] { return " an SM of " + arch.arch() + " holds"; };
  if (arch.max_blocks_per_sm > 0 && p.blocks_per_sm > arch.max_blocks_per_sm)
    return "the entry's plan has blocks_per_sm " + std::to_string(p.blocks_per_sm) + ", above the " +
           std::to_string(arch.max_blocks_per_sm) + " blocks" + on();
  const unsigned long long warps = (threads + arch.warp_size - 1) / std::max(arch.warp_size, 1);
  if (arch.max_warps_per_sm > 0 && static_cast<unsigned long long>(p.blocks_per_sm) * warps >
                                       static_cast<unsigned long long>(arch.max_warps_per_sm))
    return "the entry's plan has blocks_per_sm " + std::to_string(p.blocks_per_sm) + " of " +
           std::to_string(warps) + " warps, above the " + std::to_string(arch.max_warps_per_sm) + " warps" +
           on();
  q.device.sm_count = k.sm_count;
  q.kernel = *kernel;
  q.kernel.max_dynamic_smem_bytes = q.device.smem_per_block_optin_bytes;
  q.dynamic_smem_bytes = p.dynamic_smem_bytes;  // the key's smem rule against the plan's: above
  q.cluster = p.options.cluster;
  plan checked = p;
  try {
    validate_plan(q, checked);  // block and grid dimensions, smem, a block that fits, co-residency, PDL
  } catch (const error& bad) {
    return bad.message();
  }
  return {};
}

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

std::string invalid_measurement(const plan_measurement& m) {
  // Written so that NaN fails every test.
  if (!(m.best_ms >= measurement_min_ms && m.best_ms < measurement_max_ms))
    return "'measurement.time_ms' is not a time in 0.0001..1e6 ms";
  if (!(m.spread >= 0 && m.spread <= measurement_max_spread)) return "'measurement.spread' is not in 0..10";
  if (m.trials < 1 || m.trials > measurement_max_trials)
    return "'measurement.trials' is not a count in 1.." + std::to_string(measurement_max_trials);
  if (!is_clean_text(m.conditions, measurement_max_conditions))
    return "'measurement.conditions' is longer than " + std::to_string(measurement_max_conditions) +
           " bytes or holds control characters";
  return {};
}

bool better_measured(const std::optional<plan_measurement>& candidate,
                     const std::optional<plan_measurement>& stored) noexcept {
  if (!candidate) return false;  // unmeasured never replaces anything
  if (!stored) return true;      // measured replaces unmeasured
  const double noise = std::max({stored->spread, candidate->spread, 0.01});
  return candidate->best_ms < stored->best_ms * (1 - noise);
}

bool replaces_in_file(const stored_entry& candidate, const stored_entry& stored) noexcept {
  if (candidate.key.kernel == calibration_kernel || !stored.measurement) return true;
  // A measurement taken under contention is provisional: any clean one replaces it.
  if (!stored.measurement->clean && candidate.measurement && candidate.measurement->clean) return true;
  return better_measured(candidate.measurement, stored.measurement);
}

bool key_names_no_work_kind(const stored_key& k) {
  if (k.kernel == calibration_kernel) return false;
  const std::optional<stored_key_text> key = parse_key_text(k.policy);
  return key && key->work.empty();
}

std::string validate_stored_entry(const stored_entry& e) {
  const stored_key& k = e.key;
  if (e.measurement) {
    if (std::string why = invalid_measurement(*e.measurement); !why.empty()) return why;
  }
  if (e.epoch > max_epoch) return "'epoch' is not a count in 0..2^53";
  // The readers' bound on the plan's own numbers (plan_json.cpp), for an entry made here or elsewhere.
  if (!(e.plan.tuning_ms >= 0 && e.plan.tuning_ms <= max_tuning_ms)) return "'tuning_ms' is out of range";
  if (e.plan.trials < 0) return "'trials' is out of range";
  if (std::string why = invalid_origin(e.origin); !why.empty()) return why;
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
           "' is not a policy followed by launch-option words (cooperative, cluster=XxYxZ, pdl, work=, waves=, "
           "blocks=, rows=32, sms=, family=)";
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
  std::string mismatch;
  if (said.size() + 4 > max_plan_text_bytes && said.size() < key->policy.size() &&
      key->policy.compare(0, said.size(), said) == 0) {
    // A policy text that long was cut when the plan was read (at a character boundary): its start is the
    // key's.
    plan whole = e.plan;
    whole.policy = key->policy;
    mismatch = stored_plan_mismatch(*key, whole);
  } else {
    mismatch = stored_plan_mismatch(*key, e.plan);
  }
  if (!mismatch.empty()) return mismatch;
  return inconsistent_plan(e);
}

std::string entry_label(std::size_t index, const stored_key& key) {
  const std::string_view kernel = key.kernel;
  return "entry " + std::to_string(index) + " (kernel " +
         escape_text(kernel.substr(0, kernel.find('|')), 200) + ")";
}

namespace {
// One entry read (r) into the contents: kept (its stamp clamped, counted), or counted and named as skipped. The
// first skipped one's `why` is the contents' problem where `first_is_problem`.
void take_entry(cache_file_contents& out, entry_result r, stored_entry&& e, std::string&& why, bool first_is_problem) {
  if (r == entry_result::clamped && out.clamped++ < cache_file_max_problems) out.clamps.push_back(why);
  if (r == entry_result::ok || r == entry_result::clamped) {
    out.entries.push_back(std::move(e));
    return;
  }
  if (r == entry_result::refused && out.refused++ < cache_file_max_problems) out.refusals.push_back(why);
  if (out.problems.size() < cache_file_max_problems) out.problems.push_back(why);
  if (out.skipped++ == 0 && first_is_problem) out.problem = std::move(why);
}

// The entry lines of launchfit's layout after its head, as parse_cache_file() reads a whole file's entries: each
// that reads is kept (its stamp clamped as there), each that does not is counted and named.
void salvage_entry_lines(std::string_view body, cache_file_contents& out) {
  std::size_t index = 0;
  while (!body.empty()) {
    const std::size_t end = body.find('\n');
    std::string_view line = body.substr(0, end);
    body.remove_prefix(end == std::string_view::npos ? body.size() : end + 1);
    if (line.empty()) continue;
    if (line == file_tail.substr(0, file_tail.size() - 1)) break;  // "]}": the end of the entries
    if (line.back() == ',') line.remove_suffix(1);
    stored_entry e;
    std::string why;
    const entry_result r = read_entry_text(line, e, &why);
    why = "line " + std::to_string(index + 2) + ": " + why;
    ++index;
    take_entry(out, r, std::move(e), std::move(why), false);
  }
  stamps_cleared.fetch_add(out.clamped, std::memory_order_relaxed);
}

// The JSON values of `text` outside its strings, counted by their separators ('{', '[' and ','): what the parsed
// document's size follows (about a hundred bytes a value).
std::size_t json_values(std::string_view text) {
  std::size_t n = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[' || c == ',') {
      ++n;
    }
  }
  return n;
}
cache_file_contents parse_cache_file_text(std::string_view text) {
  cache_file_contents out;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return out;  // empty: a new file
  // A file launchfit writes has a JSON value per 16 bytes or so; a large one far denser ([{},{},...]) is not its,
  // and its document would cost 40 times its size (16 MiB of it took 600 MB). Below 4 MiB the document stays
  // within a few hundred MB whatever the file holds, and its entries are read (and bad ones counted) as usual.
  if (const std::size_t values = text.size() > (std::size_t{4} << 20) ? json_values(text) : 0;
      values > text.size() / 8) {
    out.status = cache_file_status::foreign;
    out.problem = "not a launchfit plan cache (" + std::to_string(values) + " JSON values in " +
                  std::to_string(text.size()) + " bytes: far denser than a file launchfit writes)";
    return out;
  }
  const bool mentions_format = text.find(cache_file_format) != std::string_view::npos;
  // nlohmann::json stops at a NUL byte and ignores the rest; crashes leave zero-filled blocks behind.
  const bool has_nul = text.find('\0') != std::string_view::npos;
  const json doc =
      has_nul ? json(json::value_t::discarded) : json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) {
    if (text.substr(0, file_head.size()) != file_head) {
      // Not a file launchfit wrote (a note or a README that names the format, an edited copy): left alone.
      out.status = cache_file_status::foreign;
      out.problem = mentions_format ? "not a launchfit plan cache (not valid JSON; it names the format, but is "
                                      "not a file launchfit wrote)"
                                    : "not a launchfit plan cache (not JSON)";
      return out;
    }
    // launchfit's own layout, one entry per line, cut short by a crash or damaged in a line (a byte that is not
    // UTF-8, a NUL, a number JSON cannot hold): every entry line that still reads is kept, and the file is
    // replaced with them. One bad byte used to cost every entry of the file.
    salvage_entry_lines(text.substr(file_head.size()), out);
    out.status = cache_file_status::corrupt;
    out.problem = "not valid JSON (truncated or damaged): " + std::to_string(out.entries.size()) +
                  (out.entries.size() == 1 ? " entry" : " entries") + " read line by line, " +
                  std::to_string(out.skipped) + (out.skipped == 1 ? " line" : " lines") + " skipped";
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
    out.problem = "format version " + (version == doc.end() ? std::string("missing") : value_shown(*version)) +
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
    take_entry(out, r, std::move(e), std::move(why), true);
  }
  stamps_cleared.fetch_add(out.clamped, std::memory_order_relaxed);
  return out;
}
}  // namespace

cache_file_contents parse_cache_file(std::string_view text) {
  try {
    return parse_cache_file_text(text);
  } catch (const std::bad_alloc&) {
    cache_file_contents out;
    out.status = cache_file_status::foreign;  // never replaced: what it holds is unknown
    out.problem = "could not be read (no memory to parse its " + std::to_string(text.size()) + " bytes)";
    return out;
  }
}

std::string cache_file_line(const stored_entry& e) {
  return entry_json(e).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string serialize_cache_file(const std::vector<stored_entry>& entries) {
  std::string out(file_head);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out += cache_file_line(entries[i]);
    out += i + 1 < entries.size() ? ",\n" : "\n";
  }
  out += file_tail;
  return out;
}

bool parse_cache_file_lines(std::string_view text, const std::function<bool(std::string_view)>& known,
                            std::vector<stored_entry>& out) {
  constexpr std::string_view head = file_head;
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
    // A clamped stamp, too, is left to parse_cache_file(), which counts and names it.
    if (read_entry_text(line, e) != entry_result::ok) return false;
    out.push_back(std::move(e));
  }
  return true;
}

std::string parse_stored_entry(std::string_view json_text, stored_entry& out) {
  std::string why;
  const entry_result r = read_entry_text(json_text, out, &why);
  if (r == entry_result::clamped) stamps_cleared.fetch_add(1, std::memory_order_relaxed);
  return r == entry_result::ok || r == entry_result::clamped ? std::string() : why;
}

std::uint64_t future_stamps_cleared() noexcept { return stamps_cleared.load(std::memory_order_relaxed); }

}  // namespace detail

std::string kernel_fingerprint(const kernel_resources& k) {
  // Made on every miss where a plan store is open: appended, not streamed (an ostringstream's construction
  // alone cost more than the rest of the key).
  std::string out;
  out.reserve(2 * k.name.size() + 48);
  if (detail::is_clean_text(k.name, k.name.size())) {
    out += k.name;
  } else {
    // A name that would not read back as written (bytes that are not UTF-8, control characters: the writer
    // replaced them, the reader refused them, and the kernel's stored plan was never found again, its plan made
    // and tuned on every run) is written in hex, "~x" and two digits a byte: no kernel's name begins so.
    out += "~x";
    for (const unsigned char c : k.name) detail::append_hex(out, "", c, 2);
  }
  const auto field = [&out](const auto v) {  // each in its own type, as a stream writes it
    out += '|';
    out += std::to_string(v);
  };
  field(k.regs_per_thread);
  field(k.static_smem_bytes);
  field(k.local_bytes_per_thread);
  field(k.max_threads_per_block);
  field(k.ptx_version);
  field(k.binary_version);
  return out;
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

std::optional<kernel_resources> kernel_from_fingerprint(std::string_view text) {
  // Right to left: binary, ptx, max threads, local bytes, static smem, registers; the rest is the name.
  struct field {
    long long* to;
    long long most;
    long long least;
  };
  long long regs = 0, smem = 0, local = 0, threads = 0, ptx = 0, binary = 0;
  const field fields[] = {{&binary, 9999, 0},     {&ptx, 9999, 0},       {&threads, 1024, 1},
                          {&local, 1ll << 30, 0}, {&smem, 1ll << 30, 0}, {&regs, 255, 0}};
  std::size_t end = text.size();
  for (const field& f : fields) {
    const std::size_t bar = end == 0 ? std::string_view::npos : text.rfind('|', end - 1);
    if (bar == std::string_view::npos) return std::nullopt;
    const std::string_view digits = text.substr(bar + 1, end - bar - 1);
    if (digits.empty() || digits.size() > 10 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    long long v = 0;
    for (const char c : digits) v = v * 10 + (c - '0');
    if (v < f.least || v > f.most) return std::nullopt;
    *f.to = v;
    end = bar;
  }
  if (end == 0) return std::nullopt;
  kernel_resources k;
  k.name = std::string(text.substr(0, end));
  k.demangled = k.name;
  k.regs_per_thread = static_cast<int>(regs);
  k.static_smem_bytes = static_cast<std::size_t>(smem);
  k.local_bytes_per_thread = static_cast<std::size_t>(local);
  k.max_threads_per_block = static_cast<int>(threads);
  k.ptx_version = static_cast<int>(ptx);
  k.binary_version = static_cast<int>(binary);
  return k;
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// Shared-object policies: loading, ABI checks, and the policy_base that converts query/plan to the C ABI.

#include "launchfit/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env_switch.hpp"
#include "launchfit/error.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy, parameter_error (before: in policy.hpp)
#endif
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plugin_loader.hpp"
#include "text.hpp"

namespace launchfit {
namespace {

// dlopen/dlclose one at a time, as the dynamic loader itself does (its own lock is recursive too, so a
// plugin's constructor may load another plugin): makes the ordering visible to ThreadSanitizer. Only the
// loader calls run under it; never a plugin's entry points.
std::recursive_mutex& loader_mutex() {
  static std::recursive_mutex& m = *new std::recursive_mutex();  // never destroyed
  return m;
}


constexpr std::size_t errbuf_size = 512;
constexpr std::size_t text_cap_bytes = 1024;  // escaped plugin text kept (a reason, a message)
constexpr std::size_t name_scan_bytes = 256;  // longest descriptor name read (policy names are shorter)
constexpr std::size_t version_scan_bytes = 4096;
constexpr std::size_t version_cap_bytes = 64;
constexpr int max_plugin_nesting = 4;  // plugin code calling launchfit calling plugin code ...

// The shared object, closed when the last plugin entry and policy that refer to its code are gone.
struct library {
  void* handle = nullptr;
  explicit library(void* h) : handle(h) {}
  library(const library&) = delete;
  library& operator=(const library&) = delete;
  ~library() {
    if (handle) {
      std::lock_guard<std::recursive_mutex> lock(loader_mutex());
      ::dlclose(handle);
    }
  }
};

struct loaded_plugin {
  plugin_info info;
  std::shared_ptr<library> lib;  // keeps the code and the descriptor loaded
  const launchfit_plugin_descriptor* descriptor = nullptr;
  dev_t device = 0;  // the file, so symlinks and hard links to it are the same plugin
  ino_t inode = 0;
};

// Never destroyed (a policy dropped from a static destructor still finds it). Lock order: this table, then
// the policy registry. No lock is held while plugin code runs, nor while a library is closed.
struct plugin_table {
  std::mutex mutex;
  std::vector<std::shared_ptr<const loaded_plugin>> plugins;
  std::vector<std::string> env_failures;
  std::set<std::string> env_failed_paths;
  std::atomic<bool> env_done{false};
};

plugin_table& plugins() {
  static plugin_table& table = *new plugin_table;
  return table;
}

// Files this thread is loading now (a plugin that loads itself from its entry or a constructor).
thread_local std::vector<std::pair<dev_t, ino_t>> loading_here;
// This thread is loading LAUNCHFIT_PLUGINS (a plugin calling back sees the registry as it stands).
thread_local bool loading_env_here = false;
// Depth of plugin calls on this thread.
thread_local int plugin_nesting = 0;

bool env_fallback() {
  static const bool on = [] {
    const detail::switch_reading r = detail::read_switch("LAUNCHFIT_PLUGIN_FALLBACK", false);
    if (!r.warning.empty()) logger()->warn("{}", r.warning);
    return r.on;
  }();
  return on;
}

std::string version_string(std::uint32_t v) {
  return std::to_string(LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(v)) + "." +
         std::to_string(LAUNCHFIT_PLUGIN_ABI_MINOR_OF(v));
}

// Text from a plugin buffer of `size` bytes (NUL or not), escaped and bounded; `otherwise` when empty.
std::string plugin_text(const char* buf, std::size_t size, const char* otherwise = "") {
  const std::size_t n = buf ? strnlen(buf, size) : 0;
  if (n == 0) return otherwise;
  return detail::escape_text(std::string_view(buf, n), text_cap_bytes);
}

// Runs plugin code: an exception becomes `failure` ("threw: ..."), and calls nested deeper than
// max_plugin_nesting on one thread (a plugin calling back into itself) are refused instead of recursing.
template <class F>
bool call_plugin(F&& f, std::string& failure) {
  if (plugin_nesting >= max_plugin_nesting) {
    failure = "not called: plugin calls nested " + std::to_string(plugin_nesting) +
              " deep (a plugin calling back into itself?)";
    return false;
  }
  ++plugin_nesting;
  struct leave {
    ~leave() { --plugin_nesting; }
  } guard;
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    try {
      failure = "threw: " + detail::escape_text(e.what(), text_cap_bytes);
    } catch (...) {
      failure = "threw";
    }
  } catch (...) {
    failure = "threw an exception of unknown type";
  }
  return false;
}

// ---- query <-> C structs ------------------------------------------------------------------------------

// A zeroed ABI struct stamped with its size and this build's ABI version, which the plugin checks first.
template <class C>
C abi_struct() {
  C c{};
  c.struct_size = sizeof c;
  c.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  return c;
}

launchfit_device to_c(const device_limits& d) {
  auto c = abi_struct<launchfit_device>();
  c.name = d.name.c_str();
  c.uuid = d.uuid.c_str();
  c.cc_major = d.cc_major;
  c.cc_minor = d.cc_minor;
  c.sm_count = d.sm_count;
  c.regs_per_sm = d.regs_per_sm;
  c.regs_per_block = d.regs_per_block;
  c.max_regs_per_thread = d.max_regs_per_thread;
  c.max_threads_per_sm = d.max_threads_per_sm;
  c.max_warps_per_sm = d.max_warps_per_sm;
  c.max_blocks_per_sm = d.max_blocks_per_sm;
  c.max_threads_per_block = d.max_threads_per_block;
  c.warp_size = d.warp_size;
  c.smem_per_sm_bytes = d.smem_per_sm_bytes;
  c.smem_per_block_bytes = d.smem_per_block_bytes;
  c.smem_per_block_optin_bytes = d.smem_per_block_optin_bytes;
  c.smem_reserved_per_block_bytes = d.smem_reserved_per_block_bytes;
  for (int i = 0; i < 3; ++i) {
    c.max_block_dim[i] = d.max_block_dim[i];
    c.max_grid_dim[i] = d.max_grid_dim[i];
  }
  c.l2_bytes = d.l2_bytes;
  c.peak_bandwidth_bytes_per_s = d.peak_bandwidth_bytes_per_s();
  c.cooperative_launch = d.cooperative_launch;
  c.cluster_launch = d.cluster_launch;
  return c;
}

launchfit_kernel to_c(const kernel_resources& k) {
  auto c = abi_struct<launchfit_kernel>();
  c.name = k.name.c_str();
  c.demangled = k.demangled.c_str();
  c.regs_per_thread = k.regs_per_thread;
  c.max_threads_per_block = k.max_threads_per_block;
  c.static_smem_bytes = k.static_smem_bytes;
  c.local_bytes_per_thread = k.local_bytes_per_thread;
  c.const_bytes = k.const_bytes;
  c.max_dynamic_smem_bytes = k.max_dynamic_smem_bytes;
  c.ptx_version = k.ptx_version;
  c.binary_version = k.binary_version;
  return c;
}

launchfit_plan to_c(const plan& p) {
  auto c = abi_struct<launchfit_plan>();
  c.block_x = p.block.x;
  c.block_y = p.block.y;
  c.block_z = p.block.z;
  c.blocks_per_sm = p.blocks_per_sm;
  c.dynamic_smem_bytes = p.dynamic_smem_bytes;
  c.grid_x = p.grid.x;
  c.grid_y = p.grid.y;
  c.grid_z = p.grid.z;
  c.cooperative = p.cooperative;
  c.full_grid = p.full_grid ? 1 : 0;
  c.trials = p.trials;
  c.tuning_ms = p.tuning_ms;
  std::snprintf(c.reason, sizeof c.reason, "%s", p.reason.c_str());
  return c;
}

// What the plugin finds before it decides: block 0x1x1, smem from the query, grid from the work.
launchfit_plan blank_plan() {
  auto c = abi_struct<launchfit_plan>();
  c.dynamic_smem_bytes = LAUNCHFIT_SMEM_FROM_QUERY;
  c.block_y = c.block_z = c.grid_y = c.grid_z = 1;
  return c;
}

// Throws launchfit::error (LAUNCHFIT_INVALID_PLAN) for what validate_plan() cannot see in a C++ plan: a
// negative blocks_per_sm, block dims whose product overflows, dynamic smem other than the launch's.
// Informational numbers are cleaned: negative trials and non-finite or negative times become 0.
plan from_c(const launchfit_plan& c, const query& q) {
  plan p;
  p.block = dims{c.block_x, c.block_y, c.block_z};
  p.blocks_per_sm = c.blocks_per_sm;
  p.grid = dims{c.grid_x, c.grid_x ? c.grid_y : 1, c.grid_x ? c.grid_z : 1};
  p.cooperative = c.cooperative != 0;
  p.full_grid = LAUNCHFIT_HAS_FIELD(&c, launchfit_plan, full_grid) && c.full_grid != 0;  // ABI 1.1
  p.trials = c.trials > 0 ? c.trials : 0;
  p.tuning_ms = std::isfinite(c.tuning_ms) && c.tuning_ms > 0 ? c.tuning_ms : 0;
  p.reason = plugin_text(c.reason, sizeof c.reason);
  if (c.blocks_per_sm < 0) {
    throw error(errc::invalid_plan, "validate(blocks_per_sm)",
                "blocks_per_sm " + std::to_string(c.blocks_per_sm) + " is negative (0: as many as fit)",
                q.kernel.demangled, p.to_string());
  }
  // x*y*z of three 32-bit numbers can wrap 64 bits back to a small, legal-looking count.
  const unsigned long long xy = static_cast<unsigned long long>(c.block_x) * c.block_y;
  if (c.block_z != 0 && xy > ~0ULL / c.block_z) {
    throw error(errc::invalid_plan, "validate(block)",
                "block " + std::to_string(c.block_x) + "x" + std::to_string(c.block_y) + "x" +
                    std::to_string(c.block_z) + " has more threads than any device allows",
                q.kernel.demangled, p.to_string());
  }
  const bool legal = p.block.count() > 0 && p.block.count() <= static_cast<unsigned>(q.max_block_threads());
  p.block_threads = legal ? static_cast<int>(p.block.count()) : 0;  // validation names the bad block
  p.dynamic_smem_bytes = legal ? q.smem_for(p.block_threads) : q.dynamic_smem_bytes;
  if (legal && c.dynamic_smem_bytes != LAUNCHFIT_SMEM_FROM_QUERY &&
      c.dynamic_smem_bytes != p.dynamic_smem_bytes) {
    throw error(errc::invalid_plan, "validate(smem)",
                "dynamic smem " + std::to_string(c.dynamic_smem_bytes) + " B differs from the launch's " +
                    std::to_string(p.dynamic_smem_bytes) + " B (leave LAUNCHFIT_SMEM_FROM_QUERY)",
                q.kernel.demangled, p.to_string());
  }
  return p;
}

// Items of the work in every dimension (saturating): what a plugin sizes and buckets by.
std::uint64_t total_items(const work& w) noexcept {
  if (w.rank <= 1) return w.n;
  std::uint64_t t = 0;
  const std::uint64_t z = w.rank >= 3 ? w.nz : 1;
  if (__builtin_mul_overflow(w.n, w.ny, &t) || __builtin_mul_overflow(t, z, &t)) return ~std::uint64_t{0};
  return t;
}

// Callbacks: `ctx` is the C++ query; nothing may throw across the C boundary.
int active_blocks_cb(void* ctx, int block_threads, size_t dynamic_smem_bytes) {
  const auto& q = *static_cast<const query*>(ctx);
  try {
    if (block_threads <= 0 || block_threads > q.max_block_threads()) return 0;
    if (!q.allows(block_threads)) return 0;  // the launch's block rule: never a candidate, never a trial
    if (q.active_blocks) return q.active_blocks(block_threads, dynamic_smem_bytes);
    return occupancy(q.device, q.kernel, block_threads, dynamic_smem_bytes).active_blocks_per_sm;
  } catch (...) {
    return 0;
  }
}

size_t smem_for_block_cb(void* ctx, int block_threads) {
  try {
    return static_cast<const query*>(ctx)->smem_for(block_threads);
  } catch (...) {
    return SIZE_MAX;
  }
}

// A plugin's block (a plan's or a trial's) of more than one row: the block the launch itself makes of that many
// threads, or, where the launch lets the block widen (block_x_free()), a wider 2-D block of the plugin's own;
// exactly what a stored plan of this launch may have (check_stored_plan).
void check_own_shape(const query& q, const plan& p) {
  if ((p.block.y == 1 && p.block.z == 1) || launch_makes_block(q, p.block)) return;
  throw error(errc::invalid_plan, "validate(block)",
              "block " + p.block.to_string() + " is not a block this launch makes (" +
                  launch_block(q, p.block.count()).to_string() +
                  (block_shape_free(q) ? ", or x a multiple of " + std::to_string(q.shape_rule.x_step()) +
                                             " with y >= 2 and z 1)"
                                       : "; a wider block needs 2-D work, a free y and z, and the spec's "
                                         "block_x_free())"),
              q.kernel.demangled, p.to_string());
}

double time_plan_cb(void* ctx, const launchfit_plan* c) {
  const auto& q = *static_cast<const query*>(ctx);
  try {
    plan p = from_c(*c, q);
    check_own_shape(q, p);
    shape_block(q, p);  // a 1-D candidate in the launch's block shape, as its launch would run it
    validate_plan(q, p);
    return q.time_plan(p);
  } catch (...) {
    return -1;
  }
}

// "k=v,k=v" in key order; for the plugin without launchfit's own `fallback`.
std::string join_params(const std::map<std::string, std::string>& params, bool for_plugin) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (for_plugin && k == "fallback") continue;
    if (!out.empty()) out += ',';
    out.append(k).append("=").append(v);
  }
  return out;
}

// ---- the policy --------------------------------------------------------------------------------------

class plugin_policy final : public policy_base {
 public:
  plugin_policy(std::shared_ptr<const loaded_plugin> plugin, std::map<std::string, std::string> all_params,
                std::shared_ptr<const policy> fallback)
      : plugin_(std::move(plugin)), all_params_(std::move(all_params)), fallback_(std::move(fallback)) {
    const std::string for_plugin = join_params(all_params_, true);
    char err[errbuf_size] = "";
    int status = LAUNCHFIT_PLUGIN_ERROR;
    std::string failure;
    if (!call_plugin([&] { status = desc().create(for_plugin.c_str(), &state_, err, sizeof err); },
                     failure)) {
      state_ = nullptr;
      throw error(errc::plugin, "plugin " + name() + " create",
                  "plugin '" + name() + "' (" + path_text() + ") create() " + failure);
    }
    if (status != LAUNCHFIT_PLUGIN_OK) {
      state_ = nullptr;
      throw error(errc::plugin, "plugin " + name() + " create",
                  "plugin '" + name() + "' (" + path_text() + ") rejected parameters " +
                      detail::quote_text(for_plugin, text_cap_bytes, '\'') + ": " +
                      plugin_text(err, sizeof err, "no message"));
    }
  }
  ~plugin_policy() override {
    std::string failure;
    if (!call_plugin([&] { desc().destroy(state_); }, failure)) {
      try {
        detail::logger()->error("plugin '{}' ({}) destroy() {}; its state may be lost", name(), path_text(),
                                failure);
      } catch (...) {
      }
    }
  }
  plugin_policy(const plugin_policy&) = delete;
  plugin_policy& operator=(const plugin_policy&) = delete;

  std::string name() const override { return plugin_->info.name; }
  std::string params() const override { return join_params(all_params_, false); }
  std::uint64_t hash() const override {
    std::uint64_t h = detail::hash_string(plugin_->info.name);
    h = detail::hash_combine(h, detail::hash_string(plugin_->info.version));
    return detail::hash_combine(h, detail::hash_string(params()));
  }
  // On the launch path: no nesting bound here, only the exception barrier.
  std::uint64_t work_bucket(const work& w) const override {
    const auto& d = desc();
    if (!LAUNCHFIT_HAS_FIELD(&d, launchfit_plugin_descriptor, work_bucket) || !d.work_bucket) return 0;
    try {
      return d.work_bucket(state_, static_cast<std::uint32_t>(w.kind), total_items(w), w.per_thread);
    } catch (const std::exception& e) {
      log_call_failure("work_bucket() threw: " + detail::escape_text(e.what(), text_cap_bytes) +
                       "; using bucket 0");
    } catch (...) {
      log_call_failure("work_bucket() threw an exception of unknown type; using bucket 0");
    }
    return 0;
  }

  void feedback(const plan& p, double ms) const {
    if (!desc().feedback) return;
    const launchfit_plan c = to_c(p);
    std::string failure;
    if (!call_plugin([&] { desc().feedback(state_, &c, ms); }, failure))
      log_call_failure("feedback() " + failure);
  }

 protected:
  plan choose_impl(const query& q) const override {
    const launchfit_device device = to_c(q.device);
    const launchfit_kernel kernel = to_c(q.kernel);
    auto cq = abi_struct<launchfit_query>();
    cq.device = &device;
    cq.kernel = &kernel;
    cq.dynamic_smem_bytes = q.dynamic_smem_bytes;
    cq.has_smem_rule = static_cast<bool>(q.smem_per_block);
    cq.max_block_threads = q.max_block_threads();
    cq.work_kind = static_cast<std::uint32_t>(q.work_hint.kind);
    cq.work_per_thread = q.work_hint.per_thread;
    cq.work_n = total_items(q.work_hint);  // every dimension of 2-D and 3-D work
    cq.work_rank = std::max<std::uint32_t>(q.work_hint.rank, 1);
    cq.block_shape_free = block_shape_free(q) ? 1 : 0;
    cq.work_nx = q.work_hint.n;
    cq.work_ny = q.work_hint.rank >= 2 ? q.work_hint.ny : 1;
    cq.work_nz = q.work_hint.rank >= 3 ? q.work_hint.nz : 1;
    cq.block_x_step = q.shape_rule.x_step();
    cq.bytes_in_flight_per_sm =
        q.bytes_in_flight_per_sm ? q.bytes_in_flight_per_sm : default_bytes_in_flight_per_sm(q.device);
    cq.ctx = const_cast<query*>(&q);  // the callbacks only call into it (its oracle is thread-safe)
    cq.active_blocks = active_blocks_cb;
    cq.smem_for_block = smem_for_block_cb;
    cq.time_plan = q.time_plan ? time_plan_cb : nullptr;

    launchfit_plan cp = blank_plan();
    char err[errbuf_size] = "";
    int status = LAUNCHFIT_PLUGIN_ERROR;
    std::string failure;
    if (!call_plugin([&] { status = desc().choose(state_, &cq, &cp, err, sizeof err); }, failure)) {
      return failed(q, error(errc::plugin, "plugin " + name() + " choose",
                             "plugin '" + name() + "' choose() " + failure, q.kernel.demangled));
    }

    if (status == LAUNCHFIT_PLUGIN_DECLINE) {
      std::string why = plugin_text(err, sizeof err);
      if (why.empty()) why = plugin_text(cp.reason, sizeof cp.reason);
      plan p = fallback_or_default().choose(q);
      p.reason = "declined by " + name() + (why.empty() ? "" : " (" + why + ")") + "; " +
                 fallback_or_default().name() + ": " + p.reason;
      p.match = "fallback";
      return p;
    }
    if (status != LAUNCHFIT_PLUGIN_OK) {
      std::string message = plugin_text(err, sizeof err, "no message");
      if (status != LAUNCHFIT_PLUGIN_ERROR)
        message = "unknown status " + std::to_string(status) + ": " + message;
      return failed(q, error(errc::plugin, "plugin " + name() + " choose",
                             "plugin '" + name() + "' failed: " + message, q.kernel.demangled));
    }
    try {
      plan p = from_c(cp, q);
      check_own_shape(q, p);
      plan checked = p;
      shape_block(q, checked);
      validate_plan(q, checked);  // here, so an invalid plan can fall back; choose() validates again
      return p;
    } catch (const error& e) {
      const std::string message = "plugin '" + name() + "' returned an invalid plan: " + e.message();
      return failed(q, e.cuda_result() ? error(e.cuda_result(), e.call(), message, e.kernel(), e.config())
                                       : error(e.code(), e.call(), message, e.kernel(), e.config()));
    }
  }

 private:
  const launchfit_plugin_descriptor& desc() const { return *plugin_->descriptor; }
  std::string path_text() const { return detail::escape_text(plugin_->info.resolved_path, text_cap_bytes); }
  const policy& fallback_or_default() const { return fallback_ ? *fallback_ : default_fallback(); }
  static const policy& default_fallback() {
    static const policy& p = *new max_occupancy_policy;
    return p;
  }

  // A failed call that does not change a decision (feedback, work_bucket): one error line per policy.
  void log_call_failure(const std::string& what) const {
    try {
      if (!call_failure_logged_.exchange(true)) {
        detail::logger()->error("plugin '{}' ({}) {} (further failures of {} are logged at debug level)",
                                name(), path_text(), what, to_string());
      } else {
        detail::logger()->debug("plugin '{}' {}", name(), what);
      }
    } catch (...) {
    }
  }

  // An error or invalid plan: thrown, or (fallback=<name> / LAUNCHFIT_PLUGIN_FALLBACK=1) logged once
  // per policy and replaced by the fallback's plan.
  plan failed(const query& q, const error& e) const {
    if (!fallback_ && !env_fallback()) throw e;
    const policy& instead = fallback_or_default();
    if (!logged_.exchange(true)) {
      detail::logger()->error("{}; using {} instead (further failures of {} are logged at debug level)",
                              e.what(), instead.to_string(), to_string());
    } else {
      detail::logger()->debug("{}; using {} instead", e.what(), instead.to_string());
    }
    plan p = instead.choose(q);
    p.reason = "plugin " + name() + " failed (" + e.message() + "); " + instead.name() + ": " + p.reason;
    p.match = "fallback";
    return p;
  }

  std::shared_ptr<const loaded_plugin> plugin_;
  std::map<std::string, std::string> all_params_;
  std::shared_ptr<const policy> fallback_;
  void* state_ = nullptr;
  mutable std::atomic<bool> logged_{false};
  mutable std::atomic<bool> call_failure_logged_{false};
};

// The policy-string name grammar [A-Za-z_][A-Za-z0-9_]*, read at most `max` bytes far.
bool valid_name(const char* s, std::size_t max) {
  if (!s) return false;
  const std::size_t n = strnlen(s, max);
  return n > 0 && n < max && detail::is_policy_name(std::string_view(s, n));
}

bool is_plugin_name(const std::string& name) {
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  for (const auto& p : table.plugins) {
    if (p->info.name == name) return true;
  }
  return false;
}

policy_factory factory_for(const std::shared_ptr<const loaded_plugin>& plugin) {
  return [plugin](const std::map<std::string, std::string>& params) -> std::shared_ptr<const policy> {
    std::shared_ptr<const policy> fallback;
    if (auto it = params.find("fallback"); it != params.end()) {
      // Plugins cannot be fallbacks: two plugins declining to each other would never end.
      // parameter_error carries the key, so a policy string points at the fallback's value.
      const auto bad_fallback = [&](const std::string& why) {
        return detail::parameter_error(plugin->info.name,
                                       detail::bad_parameter("fallback", detail::bad_parameter::part::value,
                                                             "parameter 'fallback': " + why));
      };
      if (is_plugin_name(it->second)) {
        throw bad_fallback("'" + it->second + "' is a plugin; the fallback must be a built-in or C++ policy");
      }
      try {
        fallback = make_policy(it->second);
      } catch (const error& e) {
        throw bad_fallback(e.message());
      }
    }
    return std::make_shared<const plugin_policy>(plugin, params, std::move(fallback));
  };
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw error(errc::plugin_refused, "load_plugin",
              "plugin " + detail::quote_text(path, text_cap_bytes, '\'') + ": " + why);
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

struct plugin_file {
  std::string path;  // absolute, symlinks resolved
  dev_t device = 0;
  ino_t inode = 0;
};

// One rule for every path: a file path, relative ones (bare names included) against the current directory,
// never searched in the library path; it must be a regular file, checked before dlopen (which would block
// forever opening a FIFO).
plugin_file resolve(const std::string& given) {
  if (given.empty()) refuse(given, "empty path");
  if (given.find('\0') != std::string::npos) refuse(given, "the path contains a NUL byte");
  char* real = ::realpath(given.c_str(), nullptr);
  if (!real) {
    const int err = errno;
    refuse(given, err == ENOENT ? std::string("no such file")
                                : std::string("cannot resolve the path: ") + std::strerror(err));
  }
  plugin_file f;
  f.path = real;
  std::free(real);
  struct stat st {};
  if (::stat(f.path.c_str(), &st) != 0) {
    refuse(given, "cannot stat " + detail::escape_text(f.path, text_cap_bytes) + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) refuse(given, std::string("not a regular file (") + file_kind(st.st_mode) + ")");
  f.device = st.st_dev;
  f.inode = st.st_ino;
  return f;
}

// The plugin already loaded from this file (or, after dlopen, this library), or nullptr. Table locked.
std::shared_ptr<const loaded_plugin> find_loaded(const plugin_table& table, const plugin_file& f,
                                                 const void* handle) {
  for (const auto& p : table.plugins) {
    if ((p->device == f.device && p->inode == f.inode) || (handle && p->lib->handle == handle)) return p;
  }
  return nullptr;
}

// Checks the descriptor a plugin's entry returned; returns its name. Refuses with the reason.
std::string check_descriptor(const std::string& path, const launchfit_plugin_descriptor* d) {
  if (!d) refuse(path, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL "() returned no descriptor");
  const std::uint32_t major = LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(d->abi_version);
  if (major != LAUNCHFIT_PLUGIN_ABI_MAJOR) {
    refuse(path, "ABI version mismatch: plugin built for ABI " + version_string(d->abi_version) +
                     ", this launchfit implements ABI " + version_string(LAUNCHFIT_PLUGIN_ABI_VERSION) +
                     (major > LAUNCHFIT_PLUGIN_ABI_MAJOR ? " (plugin is newer: upgrade launchfit)"
                                                         : " (rebuild the plugin against this launchfit)"));
  }
  if (d->struct_size < LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE) {
    refuse(path, "ABI version mismatch: descriptor struct_size " + std::to_string(d->struct_size) +
                     " is smaller than the ABI " + std::to_string(LAUNCHFIT_PLUGIN_ABI_MAJOR) +
                     ".0 minimum " + std::to_string(LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE));
  }
  if (!valid_name(d->name, name_scan_bytes)) {
    const std::string shown =
        d->name ? detail::quote_text(std::string_view(d->name, strnlen(d->name, name_scan_bytes)),
                                     text_cap_bytes, '\'')
                : "'(null)'";
    refuse(path, "invalid policy name " + shown + " (expected [A-Za-z_][A-Za-z0-9_]*, at most " +
                     std::to_string(name_scan_bytes - 1) + " characters)");
  }
  const std::string name = d->name;
  if (!d->create || !d->choose || !d->destroy) {
    refuse(path, "plugin '" + name + "' lacks " +
                     (!d->create   ? "create"
                      : !d->choose ? "choose"
                                   : "destroy") +
                     "()");
  }
  return name;
}

// Pops this thread's in-progress marker for a file.
struct loading_mark {
  explicit loading_mark(const plugin_file& f) { loading_here.emplace_back(f.device, f.inode); }
  ~loading_mark() { loading_here.pop_back(); }
  loading_mark(const loading_mark&) = delete;
  loading_mark& operator=(const loading_mark&) = delete;
};

// No launchfit lock is held while plugin code runs (dlopen runs its constructors, then its entry): a plugin
// may call back into launchfit. Two threads loading one file both run it; the first to register wins and
// the other returns the same plugin, so "load once" needs no lock held across plugin code.
plugin_info load(const std::string& given) {
  const plugin_file f = resolve(given);
  auto& table = plugins();
  {
    std::lock_guard lock(table.mutex);
    if (auto p = find_loaded(table, f, nullptr)) return p->info;  // the same file again is harmless
  }
  for (const auto& [device, inode] : loading_here) {
    if (device == f.device && inode == f.inode) {
      refuse(given,
             "it is already being loaded on this thread (a plugin loading itself from its entry point "
             "or a static constructor)");
    }
  }
  const loading_mark mark(f);

  void* handle = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(loader_mutex());
    handle = ::dlopen(f.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle) {
    const char* why = ::dlerror();
    refuse(given, "dlopen failed: " + detail::escape_text(why ? why : "unknown error", text_cap_bytes));
  }
  auto lib = std::make_shared<library>(handle);

  void* entry = ::dlsym(handle, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    refuse(given, "no symbol " LAUNCHFIT_PLUGIN_ENTRY_SYMBOL
                  " (define it extern \"C\" with LAUNCHFIT_PLUGIN_EXPORT)");
  }
  const launchfit_plugin_descriptor* d = nullptr;
  std::string failure;
  if (!call_plugin([&] { d = reinterpret_cast<launchfit_plugin_entry_fn>(entry)(); }, failure)) {
    refuse(given, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL "() " + failure);
  }
  const std::string name = check_descriptor(given, d);

  auto plugin = std::make_shared<loaded_plugin>();
  const char* version = d->version ? d->version : "";
  plugin->info = plugin_info{
      name,
      detail::escape_text(std::string_view(version, strnlen(version, version_scan_bytes)), version_cap_bytes),
      given, d->abi_version, f.path};
  plugin->lib = lib;
  plugin->descriptor = d;
  plugin->device = f.device;
  plugin->inode = f.inode;
  {
    std::lock_guard lock(table.mutex);
    // Loaded meanwhile by another thread, or by this plugin's own code through another path.
    if (auto p = find_loaded(table, f, handle)) return p->info;
    try {
      register_policy(name, factory_for(plugin));
    } catch (const error& e) {
      refuse(given, "duplicate name: " + e.message());
    }
    table.plugins.push_back(plugin);
  }
  detail::logger()->info("loaded plugin {} {} from {} (ABI {})", name, plugin->info.version,
                         detail::escape_text(f.path, text_cap_bytes), version_string(d->abi_version));
  return plugin->info;
}

}  // namespace

namespace detail {

bool is_policy_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}



void load_env_plugins() {
  auto& table = plugins();
  // A plugin loading from LAUNCHFIT_PLUGINS that calls back into launchfit sees the registry as it stands.
  if (table.env_done.load(std::memory_order_acquire) || loading_env_here) return;
  static const char* const env = std::getenv("LAUNCHFIT_PLUGINS");
  if (!env) {
    table.env_done.store(true, std::memory_order_release);
    return;
  }
  loading_env_here = true;
  struct reset {
    ~reset() { loading_env_here = false; }
  } guard;
  // Threads arriving before the list is done each go through it (loading a loaded file is harmless), so
  // none waits on another thread's plugin code; each failure is recorded and logged once.
  const std::string list = env;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(':', begin);
    if (end == std::string::npos) end = list.size();
    const std::string path = list.substr(begin, end - begin);
    begin = end + 1;
    if (path.empty()) continue;
    std::string failure;
    try {
      load(path);
    } catch (const error& e) {
      failure = e.message();
    } catch (const std::exception& e) {
      failure =
          "plugin " + quote_text(path, text_cap_bytes, '\'') + ": " + escape_text(e.what(), text_cap_bytes);
    }
    if (failure.empty()) continue;
    bool first = false;
    {
      std::lock_guard lock(table.mutex);
      if (table.env_failed_paths.insert(path).second) {
        table.env_failures.push_back(failure);
        first = true;
      }
    }
    if (first) logger()->error("LAUNCHFIT_PLUGINS: {}", failure);
  }
  table.env_done.store(true, std::memory_order_release);
}

std::string env_plugin_failures() {
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  std::string out;
  for (const auto& f : table.env_failures) out += "; LAUNCHFIT_PLUGINS: " + f;
  return out;
}

std::unique_lock<std::mutex> lock_plugin_table() { return std::unique_lock(plugins().mutex); }

std::shared_ptr<const void> forget_plugin_locked(const std::string& name) {
  auto& table = plugins();
  for (auto it = table.plugins.begin(); it != table.plugins.end(); ++it) {
    if ((*it)->info.name == name) {
      std::shared_ptr<const void> forgotten = std::move(*it);
      table.plugins.erase(it);
      return forgotten;
    }
  }
  return nullptr;
}

}  // namespace detail

plugin_info load_plugin(const std::string& path) {
  detail::load_env_plugins();  // so a plugin named there and here is one plugin, not a duplicate
  return load(path);
}

std::vector<plugin_info> loaded_plugins() {
  detail::load_env_plugins();
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  std::vector<plugin_info> out;
  for (const auto& p : table.plugins) out.push_back(p->info);
  return out;
}

void plugin_feedback(const policy& chooser, const plan& chosen, double ms) {
  if (const auto* p = dynamic_cast<const plugin_policy*>(&chooser)) p->feedback(chosen, ms);
}

}  // namespace launchfit

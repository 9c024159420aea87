// Shared-object policies: loading, ABI checks, and the policy_base that converts query/plan to the C ABI.

#include "launchfit/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plugin_loader.hpp"

namespace launchfit {
namespace {

constexpr std::size_t errbuf_size = 512;

struct loaded_plugin {
  plugin_info info;
  std::string canonical_path;
  const launchfit_plugin_descriptor* descriptor = nullptr;  // static data of the plugin, never unloaded
};

struct plugin_table {
  std::mutex mutex;
  std::vector<std::shared_ptr<const loaded_plugin>> plugins;
  std::vector<std::string> env_failures;
};

plugin_table& plugins() {
  static plugin_table table;
  return table;
}

bool env_fallback() {
  static const bool on = [] {
    const char* v = std::getenv("LAUNCHFIT_PLUGIN_FALLBACK");
    return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "on") == 0);
  }();
  return on;
}

std::string version_string(std::uint32_t v) {
  return std::to_string(LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(v)) + "." +
         std::to_string(LAUNCHFIT_PLUGIN_ABI_MINOR_OF(v));
}

std::string c_message(const char* buf, const char* otherwise) {
  return buf[0] ? std::string(buf) : std::string(otherwise);
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

// Throws launchfit::error (validate(smem)) when the plugin asked for dynamic smem other than the launch's.
plan from_c(const launchfit_plan& c, const query& q) {
  plan p;
  p.block = dims{c.block_x, c.block_y, c.block_z};
  p.blocks_per_sm = c.blocks_per_sm;
  p.grid = dims{c.grid_x, c.grid_x ? c.grid_y : 1, c.grid_x ? c.grid_z : 1};
  p.cooperative = c.cooperative != 0;
  p.trials = c.trials;
  p.tuning_ms = c.tuning_ms;
  p.reason.assign(c.reason, strnlen(c.reason, sizeof c.reason));
  const bool legal = p.block.count() > 0 && p.block.count() <= static_cast<unsigned>(q.max_block_threads());
  p.block_threads = legal ? static_cast<int>(p.block.count()) : 0;  // validation names the bad block
  p.dynamic_smem_bytes = legal ? q.smem_for(p.block_threads) : q.dynamic_smem_bytes;
  if (legal && c.dynamic_smem_bytes != LAUNCHFIT_SMEM_FROM_QUERY &&
      c.dynamic_smem_bytes != p.dynamic_smem_bytes) {
    throw error("validate(smem)", "LAUNCHFIT_INVALID_PLAN",
                "dynamic smem " + std::to_string(c.dynamic_smem_bytes) + " B differs from the launch's " +
                    std::to_string(p.dynamic_smem_bytes) + " B (leave LAUNCHFIT_SMEM_FROM_QUERY)",
                q.kernel.demangled, p.to_string());
  }
  return p;
}

// Callbacks: `ctx` is the C++ query; nothing may throw across the C boundary.
int active_blocks_cb(void* ctx, int block_threads, size_t dynamic_smem_bytes) {
  const auto& q = *static_cast<const query*>(ctx);
  try {
    if (block_threads <= 0 || block_threads > q.max_block_threads()) return 0;
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

double time_plan_cb(void* ctx, const launchfit_plan* c) {
  const auto& q = *static_cast<const query*>(ctx);
  try {
    plan p = from_c(*c, q);
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
    const int status = desc().create(for_plugin.c_str(), &state_, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (status != LAUNCHFIT_PLUGIN_OK) {
      throw error("plugin " + name() + " create", "LAUNCHFIT_PLUGIN_ERROR",
                  "plugin '" + name() + "' (" + plugin_->info.path + ") rejected parameters '" + for_plugin +
                      "': " + c_message(err, "no message"));
    }
  }
  ~plugin_policy() override { desc().destroy(state_); }
  plugin_policy(const plugin_policy&) = delete;
  plugin_policy& operator=(const plugin_policy&) = delete;

  std::string name() const override { return plugin_->info.name; }
  std::string params() const override { return join_params(all_params_, false); }
  std::uint64_t hash() const override {
    std::uint64_t h = detail::hash_string(plugin_->info.name);
    h = detail::hash_combine(h, detail::hash_string(plugin_->info.version));
    return detail::hash_combine(h, detail::hash_string(params()));
  }
  std::uint64_t work_bucket(const work& w) const override {
    const auto& d = desc();
    if (!LAUNCHFIT_HAS_FIELD(&d, launchfit_plugin_descriptor, work_bucket) || !d.work_bucket) return 0;
    return d.work_bucket(state_, static_cast<std::uint32_t>(w.kind), w.n, w.per_thread);
  }

  void feedback(const plan& p, double ms) const {
    if (!desc().feedback) return;
    const launchfit_plan c = to_c(p);
    desc().feedback(state_, &c, ms);
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
    cq.work_n = q.work_hint.n;
    cq.bytes_in_flight_per_sm =
        q.bytes_in_flight_per_sm ? q.bytes_in_flight_per_sm : default_bytes_in_flight_per_sm(q.device);
    cq.ctx = const_cast<query*>(&q);  // the callbacks only call into it (its oracle is thread-safe)
    cq.active_blocks = active_blocks_cb;
    cq.smem_for_block = smem_for_block_cb;
    cq.time_plan = q.time_plan ? time_plan_cb : nullptr;

    launchfit_plan cp = blank_plan();
    char err[errbuf_size] = "";
    const int status = desc().choose(state_, &cq, &cp, err, sizeof err);
    err[sizeof err - 1] = '\0';

    if (status == LAUNCHFIT_PLUGIN_DECLINE) {
      cp.reason[sizeof cp.reason - 1] = '\0';
      const std::string why = err[0] ? err : cp.reason;
      plan p = fallback_or_default().choose(q);
      p.reason = "declined by " + name() + (why.empty() ? "" : " (" + why + ")") + "; " +
                 fallback_or_default().name() + ": " + p.reason;
      p.match = "fallback";
      return p;
    }
    if (status != LAUNCHFIT_PLUGIN_OK) {
      return failed(
          q, error("plugin " + name() + " choose", "LAUNCHFIT_PLUGIN_ERROR",
                   "plugin '" + name() + "' failed: " +
                       c_message(err, status == LAUNCHFIT_PLUGIN_ERROR ? "no message" : "unknown status"),
                   q.kernel.demangled));
    }
    try {
      plan p = from_c(cp, q);
      plan checked = p;
      validate_plan(q, checked);  // here, so an invalid plan can fall back; choose() validates again
      return p;
    } catch (const error& e) {
      return failed(q, error(e.call(), e.cuda_error(),
                             "plugin '" + name() + "' returned an invalid plan: " + e.message(), e.kernel(),
                             e.config()));
    }
  }

 private:
  const launchfit_plugin_descriptor& desc() const { return *plugin_->descriptor; }
  const policy& fallback_or_default() const { return fallback_ ? *fallback_ : default_fallback(); }
  static const policy& default_fallback() {
    static const max_occupancy_policy p;
    return p;
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
};

bool valid_name(const char* s) {
  if (!s || !*s) return false;
  for (const char* c = s; *c; ++c) {
    const bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
    if (!alpha && !(c != s && *c >= '0' && *c <= '9')) return false;
  }
  return true;
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
      if (is_plugin_name(it->second)) {
        throw std::invalid_argument("parameter 'fallback': '" + it->second +
                                    "' is a plugin; the fallback must be a built-in or C++ policy");
      }
      try {
        fallback = make_policy(it->second);
      } catch (const error& e) {
        throw std::invalid_argument("parameter 'fallback': " + e.message());
      }
    }
    return std::make_shared<const plugin_policy>(plugin, params, std::move(fallback));
  };
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw error("load_plugin", "LAUNCHFIT_PLUGIN_REFUSED", "plugin '" + path + "': " + why);
}

plugin_info load(const std::string& path) {
  static std::mutex loading;  // one load at a time, so two threads loading one file load it once
  std::lock_guard serial(loading);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) refuse(path, "no such file");
  std::error_code ec;
  std::string canonical = std::filesystem::canonical(path, ec).string();
  if (ec) canonical = path;
  {
    auto& table = plugins();
    std::lock_guard lock(table.mutex);
    for (const auto& p : table.plugins) {
      if (p->canonical_path == canonical) return p->info;  // loading the same file again is harmless
    }
  }

  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) refuse(path, std::string("dlopen failed: ") + ::dlerror());
  struct closer {
    void* handle;
    ~closer() {
      if (handle) ::dlclose(handle);
    }
  } close_on_error{handle};

  void* entry = ::dlsym(handle, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    refuse(path, "no symbol " LAUNCHFIT_PLUGIN_ENTRY_SYMBOL
                 " (define it extern \"C\" with LAUNCHFIT_PLUGIN_EXPORT)");
  }
  const launchfit_plugin_descriptor* d = reinterpret_cast<launchfit_plugin_entry_fn>(entry)();
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
  if (!valid_name(d->name)) {
    refuse(path, std::string("invalid policy name '") + (d->name ? d->name : "(null)") +
                     "' (expected [A-Za-z_][A-Za-z0-9_]*)");
  }
  if (!d->create || !d->choose || !d->destroy) {
    refuse(path, std::string("plugin '") + d->name + "' lacks " +
                     (!d->create   ? "create"
                      : !d->choose ? "choose"
                                   : "destroy") +
                     "()");
  }

  auto plugin = std::make_shared<loaded_plugin>();
  plugin->info = plugin_info{d->name, d->version ? d->version : "", path, d->abi_version};
  plugin->canonical_path = canonical;
  plugin->descriptor = d;
  try {
    register_policy(plugin->info.name, factory_for(plugin));
  } catch (const error& e) {
    refuse(path, "duplicate name: " + e.message());
  }
  close_on_error.handle = nullptr;  // plugins stay loaded: policies and plans refer to their code
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  table.plugins.push_back(plugin);
  return plugin->info;
}

}  // namespace

namespace detail {

void load_env_plugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("LAUNCHFIT_PLUGINS");
    if (!env) return;
    const std::string list = env;
    std::size_t begin = 0;
    while (begin <= list.size()) {
      std::size_t end = list.find(':', begin);
      if (end == std::string::npos) end = list.size();
      const std::string path = list.substr(begin, end - begin);
      begin = end + 1;
      if (path.empty()) continue;
      try {
        load(path);
      } catch (const error& e) {
        logger()->error("LAUNCHFIT_PLUGINS: {}", e.message());
        auto& table = plugins();
        std::lock_guard lock(table.mutex);
        table.env_failures.push_back(e.message());
      }
    }
  });
}

std::string env_plugin_failures() {
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  std::string out;
  for (const auto& f : table.env_failures) out += "; LAUNCHFIT_PLUGINS: " + f;
  return out;
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

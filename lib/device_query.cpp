// SPDX-License-Identifier: MIT
// device_limits from the driver, and the identity of the current context. Limits the driver does not report (allocation granularities) come from
// the built-in table entry of the same architecture.

#include "device_query.hpp"

#include <atomic>
#include <cstdio>
#include <map>
#include <vector>
#include <mutex>
#include <string>
#include <unordered_map>

#include "driver.hpp"
#include "lifecycle.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "plan_cache.hpp"

namespace launchfit {
namespace {

device_limits table_base(int major, int minor) {
  const int cc = major * 10 + minor;
  device_limits best;
  int best_cc = -1;
  for (const device_limits& d : device_limits::builtin_table()) {
    if (d.cc() == cc) return d;
    // Unknown (newer) architecture: start from the closest older one; the driver overrides the rest.
    if (d.cc() < cc && d.cc() > best_cc) {
      best = d;
      best_cc = d.cc();
    }
  }
  return best;
}

std::string format_uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

device_limits query_device(CUdevice dev, CUcontext ctx) {
  const auto& d = detail::driver();
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    detail::check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  const int major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  device_limits l = table_base(major, minor);
  l.cc_major = major;
  l.cc_minor = minor;
  char name[256] = {};
  detail::check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  l.name = name;
  CUuuid uuid{};
  if (d.cuDeviceGetUuid && d.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) l.uuid = format_uuid(uuid);
  l.ordinal = static_cast<int>(dev);
  l.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  // A green context (or MPS partition) may see fewer SMs than the device has: size grids for the context.
  if (ctx && d.cuCtxGetDevResource) {
    CUdevResource res{};
    if (d.cuCtxGetDevResource(ctx, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS && res.sm.smCount > 0)
      l.sm_count = static_cast<int>(res.sm.smCount);
  }
  l.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  l.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  l.smem_per_sm_bytes = static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  l.smem_per_block_bytes = static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  l.smem_per_block_optin_bytes =
      static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  l.smem_reserved_per_block_bytes =
      static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  l.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  l.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  l.max_warps_per_sm = l.max_threads_per_sm / l.warp_size;
  l.max_blocks_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  l.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  l.max_block_dim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  l.max_block_dim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  l.max_block_dim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  l.max_grid_dim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  l.max_grid_dim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  l.max_grid_dim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  l.l2_bytes = static_cast<std::size_t>(attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  l.memory_bus_width_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  l.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  l.cooperative_launch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0;
  l.cluster_launch = attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) != 0;
  return l;
}

}  // namespace

device_limits device_limits::query(int ordinal) {
  const auto& d = detail::driver();
  int count = 0;
  detail::check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw error(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet",
                "device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) +
                    " device(s) present)");
  }
  CUdevice dev{};
  detail::check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  return query_device(dev, nullptr);
}

device_limits device_limits::query_current() {
  const auto& d = detail::driver();
  CUcontext ctx = nullptr;
  detail::check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    throw error(CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetCurrent",
                "no current CUDA context (call cudaSetDevice/cudaFree(0) or cuCtxSetCurrent first)");
  }
  CUdevice dev{};
  detail::check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return query_device(dev, ctx);
}

}  // namespace launchfit

// ---- the current context's identity ---------------------------------------------------------------------

namespace launchfit::detail {
namespace {

// The context's identity: cuCtxGetId, or the handle on drivers before 12.0 (which have no identity).
CUresult identity_of(const driver_api& d, CUcontext ctx, std::uint64_t& id) noexcept {
  if (!d.cuCtxGetId) {
    id = reinterpret_cast<std::uintptr_t>(ctx);
    return CUDA_SUCCESS;
  }
  unsigned long long got = 0;
  const CUresult st = d.cuCtxGetId(ctx, &got);
  id = got;
  return st;
}
std::uint64_t identity_of(const driver_api& d, CUcontext ctx) {
  std::uint64_t id = 0;
  check(identity_of(d, ctx, id), "cuCtxGetId");
  return id;
}

// The registry's lock, a leaf (nothing is locked under it): constant-initialised and registered at load time: a fork never meets its registration half done.
std::mutex contexts_m;
std::mutex& contexts_mutex() noexcept { return contexts_m; }
const bool contexts_fork = lifecycle::on_fork_leaf_mutex<contexts_mutex>();

struct contexts {
  std::mutex& m = contexts_m;
  std::unordered_map<CUcontext, std::uint64_t> id_of_handle;  // the identity last seen behind each handle
  std::map<std::uint64_t, device_limits*> limits;             // by identity; entries are never freed
  std::vector<device_limits*> gone;  // a destroyed context's: still read by reports, kept reachable
};

contexts& known_contexts() {
  static contexts& c = *new contexts();  // never destroyed, as every launchfit singleton
  return c;
}
// Made at load time, before any thread: a fork never meets its initialiser in progress.
const bool contexts_made = (known_contexts(), true);

// What this thread last found under contexts::m, valid while `generation` is contexts_generation: every miss
// notes its context and asks its limits, and a thread's misses are mostly of one context, which then costs no
// lock. The generation moves (under contexts::m) whenever a handle is first seen or names a new identity (the
// only changes that drop limits), so a stale memo is never taken.
std::atomic<std::uint64_t> contexts_generation{1};
struct context_memo {
  std::uint64_t generation = 0;  // 0: nothing remembered
  CUcontext handle = nullptr;    // note_context(): the handle known to name `id`
  std::uint64_t id = 0;
  std::uint64_t limits_generation = 0;  // limits_for(): `limits` are `limits_id`'s
  std::uint64_t limits_id = 0;
  const device_limits* limits = nullptr;
};
thread_local context_memo memo;

}  // namespace

context_ref current_context(const launch_request& r) {
  const driver_api& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx && r.resolve) {
    // A thread that has not used the runtime yet: resolving the kernel makes the primary context current.
    r.resolve(r.stub);
    check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  }
  if (!ctx) {
    throw error(CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetCurrent",
                "no current CUDA context (cuCtxSetCurrent / cudaSetDevice first)");
  }
  return context_ref{ctx, identity_of(d, ctx)};
}

context_ref current_context(const launch_request& r, std::uint64_t id) {
  CUcontext ctx = nullptr;
  if (driver().cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return context_ref{ctx, id};
  return current_context(r);
}


void note_context(const context_ref& ctx) {
  if (memo.handle == ctx.handle && memo.id == ctx.id && memo.generation != 0 &&
      memo.generation == contexts_generation.load(std::memory_order_acquire))
    return;  // this thread found the handle naming this identity, and nothing has changed since
  // Under contexts::m: this thread's memo names the identity behind the handle as of `generation`.
  const auto remember = [&ctx](std::uint64_t generation) {
    memo.generation = generation;
    memo.handle = ctx.handle;
    memo.id = ctx.id;
  };
  contexts& c = known_contexts();
  std::uint64_t dead = 0;
  {
    std::lock_guard<std::mutex> lock(c.m);
    auto it = c.id_of_handle.find(ctx.handle);  // a known handle: no node allocated to find it
    if (it == c.id_of_handle.end()) {
      c.id_of_handle.emplace(ctx.handle, ctx.id);
      remember(contexts_generation.fetch_add(1, std::memory_order_acq_rel) + 1);
      return;
    }
    if (it->second == ctx.id) {
      remember(contexts_generation.load(std::memory_order_acquire));
      return;
    }
    dead = it->second;
    it->second = ctx.id;
    remember(contexts_generation.fetch_add(1, std::memory_order_acq_rel) + 1);  // every other memo is stale
    // The limits stay allocated (a report may still read them); they are simply never found again.
    if (const auto it = c.limits.find(dead); it != c.limits.end()) {
      c.gone.push_back(it->second);
      c.limits.erase(it);
    }
  }
  forget_context(dead);
}

const device_limits& limits_for(const context_ref& ctx) {
  if (memo.limits && memo.limits_id == ctx.id &&
      memo.limits_generation == contexts_generation.load(std::memory_order_acquire))
    return *memo.limits;
  contexts& c = known_contexts();
  const auto remember = [](std::uint64_t id, const device_limits* l) -> const device_limits& {
    memo.limits_generation = contexts_generation.load(std::memory_order_acquire);  // under contexts::m
    memo.limits_id = id;
    memo.limits = l;
    return *l;
  };
  {
    std::lock_guard<std::mutex> lock(c.m);
    if (auto it = c.limits.find(ctx.id); it != c.limits.end()) return remember(ctx.id, it->second);
  }
  // Queried outside the lock (driver calls); the first to publish wins.
  auto* fresh = new device_limits(device_limits::query_current());
  std::lock_guard<std::mutex> lock(c.m);
  auto [it, inserted] = c.limits.emplace(ctx.id, fresh);
  if (!inserted) delete fresh;
  return remember(ctx.id, it->second);
}

}  // namespace launchfit::detail

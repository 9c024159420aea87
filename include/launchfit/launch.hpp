#pragma once
// launchfit::launch — replaces kernel<<<grid, block, smem, stream>>>(args...) with
// launch(kernel, spec, args...), where spec is a policy plus the work shape, stream and smem rule.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "launchfit/detail/launch_request.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {

// A policy plus everything about one launch that is not a kernel argument. Build it with the factories
// below and chain: max_occupancy().items(n).on(stream).smem(bytes). A setter called on a temporary returns
// a new spec by value (so `const auto& s = fixed(256).items(n);` holds a live spec); on a named spec it
// changes that spec and returns a reference to it.
template <class Policy>
class spec {
 public:
  explicit spec(Policy p) : policy_(std::move(p)) {}

  // One thread per item: grid = ceil(n / block).
  spec items(std::uint64_t n) && { return std::move(items(n)); }
  spec& items(std::uint64_t n) & {
    work_.kind = work::shape::items;
    work_.n = n;
    return *this;
  }
  // k items per thread: grid = ceil(n / (block x k)).
  spec per_thread(std::uint32_t k) && { return std::move(per_thread(k)); }
  spec& per_thread(std::uint32_t k) & {
    work_.per_thread = k;
    return *this;
  }
  // The kernel loops over n items: grid = min(ceil(n / block), the resident blocks the policy wants).
  spec grid_stride(std::uint64_t n) && { return std::move(grid_stride(n)); }
  spec& grid_stride(std::uint64_t n) & {
    work_.kind = work::shape::grid_stride;
    work_.n = n;
    return *this;
  }
  spec on(CUstream s) && { return std::move(on(s)); }
  spec& on(CUstream s) & {
    stream_ = s;
    return *this;
  }
  // Fixed dynamic shared memory per block.
  spec smem(std::size_t bytes) && { return std::move(smem(bytes)); }
  spec& smem(std::size_t bytes) & {
    smem_bytes_ = bytes;
    smem_fn_ = nullptr;  // std::function: no allocation for a small lambda, on every launch that builds a spec
    smem_rule_ = bytes;
    return *this;
  }
  // Dynamic shared memory as a function of the block size (capturing lambdas welcome). The plan cache
  // tells rules apart by their type plus `key`: give a different key when captured state changes the result.
  template <class F>
  spec smem_per_block(F f, std::uint64_t key = 0) && {
    return std::move(smem_per_block(std::move(f), key));
  }
  template <class F>
  spec& smem_per_block(F f, std::uint64_t key = 0) & {
    static_assert(std::is_invocable_r_v<std::size_t, F&, int>, "smem_per_block(f): f(int block) -> bytes");
    smem_fn_ = smem_per_block_fn(std::move(f));
    smem_rule_ = detail::hash_combine(typeid(F).hash_code() | 1ULL << 63, key);
    return *this;
  }
  // Thread-block cluster dimensions (sm_90+).
  spec cluster(dims c) && { return std::move(cluster(c)); }
  spec& cluster(dims c) & {
    cluster_ = c;
    return *this;
  }
  // The kernel needs a cooperative launch (it calls grid.sync()): whatever policy decides, the launch stays
  // cooperative and its grid is checked for co-residency, or it is refused. cooperative() implies it.
  spec cooperative() && { return std::move(cooperative()); }
  spec& cooperative() & {
    cooperative_ = true;
    return *this;
  }
  // The kernel may be run several times, back to back, on the same arguments: lets a tuning policy time
  // candidate plans on the real arguments. With reset(f) as well: re-running is memory-safe but changes the
  // data (e.g. it accumulates); trials then run back to back after f, and f restores the data at the end.
  spec rerunnable() && { return std::move(rerunnable()); }
  spec& rerunnable() & {
    rerunnable_ = true;
    return *this;
  }
  // Called before every tuning sample to restore the kernel's inputs/outputs (implies tunable); without
  // rerunnable(), each sample is a single launch after f.
  spec reset(std::function<void()> f) && { return std::move(reset(std::move(f))); }
  spec& reset(std::function<void()> f) & {
    reset_ = std::make_shared<std::function<void()>>(std::move(f));
    return *this;
  }

  const Policy& policy_value() const noexcept { return policy_; }
  const launchfit::policy& get_policy() const noexcept {
    if constexpr (std::is_base_of_v<launchfit::policy, Policy>) {
      return policy_;
    } else {
      return *policy_;
    }
  }
  const work& work_shape() const noexcept { return work_; }
  CUstream stream() const noexcept { return stream_; }
  std::size_t smem_bytes() const noexcept { return smem_bytes_; }
  const smem_per_block_fn* smem_fn() const noexcept { return smem_fn_ ? &smem_fn_ : nullptr; }
  std::uint64_t smem_rule() const noexcept { return smem_rule_; }
  dims cluster_dims() const noexcept { return cluster_; }
  bool requires_cooperative() const noexcept { return cooperative_; }
  bool is_rerunnable() const noexcept { return rerunnable_ || reset_; }
  bool runs_back_to_back() const noexcept { return rerunnable_; }
  const std::function<void()>* reset_fn() const noexcept { return reset_.get(); }

 private:
  Policy policy_;
  work work_{};
  CUstream stream_ = nullptr;
  std::size_t smem_bytes_ = 0;
  smem_per_block_fn smem_fn_;
  std::uint64_t smem_rule_ = 0;
  dims cluster_{};
  bool cooperative_ = std::is_same_v<Policy, cooperative_policy>;
  bool rerunnable_ = false;
  std::shared_ptr<std::function<void()>> reset_;
};

// ---- factories --------------------------------------------------------------------------------------
// Most resident threads; of the block sizes that reach it, the one nearest prefer_block (0: the largest, exactly
// cuOccupancyMaxPotentialBlockSize's block). block_limit > 0 caps the block size.
inline spec<max_occupancy_policy> max_occupancy(int prefer_block = max_occupancy_params{}.prefer_block,
                                                int block_limit = 0) {
  return spec<max_occupancy_policy>(max_occupancy_policy{max_occupancy_params{prefer_block, block_limit}});
}
// Little's law sizing; target_per_sm 0 uses the device default (32 KB on sm_90).
inline spec<bytes_in_flight_policy> bytes_in_flight(int per_thread_bytes, int target_per_sm = 0,
                                                    int prefer_block = bytes_in_flight_params{}.prefer_block) {
  return spec<bytes_in_flight_policy>(
      bytes_in_flight_policy{bytes_in_flight_params{per_thread_bytes, target_per_sm, prefer_block}});
}
// Co-resident grid, launched cooperatively; blocks_per_sm 0 = as many as fit; block 0 = max-occupancy block.
inline spec<cooperative_policy> cooperative(int blocks_per_sm = 0, int block = 0) {
  return spec<cooperative_policy>(cooperative_policy{cooperative_params{blocks_per_sm, block}});
}
// Today's <<<grid, block>>>; grid 0 = from the work shape.
inline spec<fixed_policy> fixed(int block, int grid = 0) {
  return spec<fixed_policy>(fixed_policy{fixed_params{block, grid}});
}
// Any policy object (registered, from a plugin, or from a string).
inline spec<std::shared_ptr<const policy>> use(std::shared_ptr<const policy> p) {
  if (!p) throw error("launchfit::use", "LAUNCHFIT_INVALID_POLICY", "null policy");
  return spec<std::shared_ptr<const policy>>(std::move(p));
}
inline spec<std::shared_ptr<const policy>> use(std::string_view policy_string) {
  return use(policy_from_string(policy_string));
}

namespace detail {

// A runtime-API __global__ function's CUfunction in the current context, resolved through the caller's
// CUDA runtime (so the kernel registered by the caller's module is found). Called on cache misses only.
inline CUfunction resolve_runtime_kernel(const void* stub) {
  cudaFunction_t f = nullptr;
  const cudaError_t st = cudaGetFuncBySymbol(&f, stub);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    throw error("cudaGetFuncBySymbol", cudaGetErrorName(st), cudaGetErrorString(st));
  }
  return reinterpret_cast<CUfunction>(f);
}

template <class Policy>
launch_request make_request(const spec<Policy>& s) {
  launch_request r;
  const launchfit::policy& p = s.get_policy();
  r.policy = &p;
  r.policy_hash = p.hash();
  r.bucket = p.work_bucket(s.work_shape());
  r.smem_bytes = s.smem_bytes();
  r.smem_fn = s.smem_fn();
  r.smem_rule = s.smem_rule();
  r.shape = s.work_shape();
  r.stream = s.stream();
  r.cluster = s.cluster_dims();
  r.cooperative = s.requires_cooperative();
  if constexpr (!std::is_base_of_v<launchfit::policy, Policy>) {
    // use("cooperative") / use(ptr): the policy object decides at run time whether the launch is cooperative.
    r.cooperative = r.cooperative || dynamic_cast<const cooperative_policy*>(&p) != nullptr;
  }
  r.rerunnable = s.is_rerunnable();
  r.back_to_back = s.runs_back_to_back();
  r.reset = s.reset_fn();
  return r;
}

}  // namespace detail

// Runtime-API kernel: argument count and convertibility checked at compile time; every argument is
// converted to the kernel's parameter type before its address is passed.
template <class... Params, class Policy, class... Args>
void launch(void (*k)(Params...), const spec<Policy>& s, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launchfit::launch: wrong number of kernel arguments");
  static_assert((std::is_convertible_v<Args&&, Params> && ...),
                "launchfit::launch: an argument does not convert to the kernel's parameter type");
  if (!k) throw error("launchfit::launch", "CUDA_ERROR_INVALID_HANDLE", "null kernel function pointer");
  std::tuple<std::decay_t<Params>...> converted(static_cast<Params>(std::forward<Args>(args))...);
  std::apply(
      [&](auto&... a) {
        std::array<void*, sizeof...(Params)> ptrs{static_cast<void*>(&a)...};
        detail::launch_request r = detail::make_request(s);
        r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
        r.stub = reinterpret_cast<const void*>(k);
        r.resolve = &detail::resolve_runtime_kernel;
        r.args = ptrs.data();
        r.arg_count = ptrs.size();
        r.has_arguments = true;
        detail::launch(r);
      },
      converted);
}

// Driver-API kernel: each argument is passed as one kernel parameter (a struct too: a kernel may take one by
// value; lf::args(aggregate) from launchfit/args.hpp passes an aggregate's fields instead). Argument count
// and sizes are checked against cuFuncGetParamInfo where the driver reports them.
template <class Policy, class... Args>
void launch(const kernel& k, const spec<Policy>& s, Args&&... args) {
  std::array<void*, sizeof...(Args)> ptrs{const_cast<void*>(static_cast<const void*>(&args))...};
  std::array<std::size_t, sizeof...(Args)> sizes{sizeof(std::decay_t<Args>)...};
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = k.id();
  r.driver_kernel = &k;
  r.args = ptrs.data();
  r.arg_sizes = sizes.data();
  r.arg_count = sizeof...(Args);
  r.has_arguments = true;
  detail::launch(r);
}

// The plan a launch would use, without launching (computed and cached on first use).
template <class... Params, class Policy>
const plan& plan_for(void (*k)(Params...), const spec<Policy>& s) {
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
  r.stub = reinterpret_cast<const void*>(k);
  r.resolve = &detail::resolve_runtime_kernel;
  return detail::plan_for(r);
}
template <class Policy>
const plan& plan_for(const kernel& k, const spec<Policy>& s) {
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = k.id();
  r.driver_kernel = &k;
  return detail::plan_for(r);
}

}  // namespace launchfit

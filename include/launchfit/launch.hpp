// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief launch() and plan_for() for every kind of kernel, with use(policy) and planned(plan):
/// launchfit/base.hpp plus driver-API kernels, plans and policies.
///
// launchfit::launch — replaces kernel<<<grid, block, smem, stream>>>(args...) with
// launch(kernel, spec, args...), where spec is a policy plus the work shape, stream and smem rule.
// The spec, its factories and launch() for runtime-API kernels are in launchfit/base.hpp (the cheapest
// include that launches); this header adds driver-API kernels, use(policy) and planned(plan), and brings
// plans, policies, kernels and errors whole.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "launchfit/base.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {
inline namespace LAUNCHFIT_DEFAULT_STREAM_NS {

// A plan from plan_for() (or launched().plan()) launched verbatim: its block, grid rule, residency, dynamic
// smem and launch options (cooperative, cluster, PDL, SM budget, a grid_stride launch's waves cap), validated
// again for the kernel launched.
// Give the work again (items(n), grid_stride(n)); overrides never replace it. With it "plan, compute
// block-dependent arguments, launch" cannot diverge: launch(k, planned(p).items(n), args_from(p)...).
inline spec<planned_policy> planned(const plan& p) {
  spec<planned_policy> s(planned_policy{planned_params{
      static_cast<int>(p.block.x), static_cast<int>(p.block.y), static_cast<int>(p.block.z),
      static_cast<int>(p.grid.x), static_cast<int>(p.grid.y), static_cast<int>(p.grid.z), p.blocks_per_sm,
      p.full_grid ? 1 : 0}});
  s.smem(p.dynamic_smem_bytes);
  const launch_options& o = p.options;
  if (o.cooperative) s.cooperative();
  if (o.has_cluster() && !o.cluster_from_kernel) s.cluster(o.cluster, o.non_portable_cluster || o.cluster.count() > 8);
  if (o.programmatic) s.pdl();
  if (o.sm_budget > 0) s.sms(o.sm_budget);  // the launch's SM budget, not the device's SMs (a full grid stays)
  if (o.waves > 0) s.waves(o.waves);
  s.shape(p.shape_rule);
  return s;
}
// Any policy object (registered, from a plugin, or from a string).
inline spec<std::shared_ptr<const policy>> use(std::shared_ptr<const policy> p) {
  if (!p) throw error(errc::invalid_policy, "launchfit::use", "null policy");
  return spec<std::shared_ptr<const policy>>(std::move(p));
}
// A policy by its string, "name(k=v,...)": a built-in, registered or plugin policy (policy_from_string).
inline spec<std::shared_ptr<const policy>> use(std::string_view policy_string) {
  return use(policy_from_string(policy_string));
}

}  // inline namespace LAUNCHFIT_DEFAULT_STREAM_NS

namespace detail {
// A driver-API kernel's request with its arguments (each one kernel parameter), launched (or added as a node,
// where the request says so).
// `R`: a launch_request, or a launch_probe.
template <class R, class... Args>
inline launched launch_driver(R& r, const kernel& k, Args&&... args) {
  static_assert(!(is_plan_argument<std::decay_t<Args>>::value || ...),
                "launchfit::launch: from_plan() arguments need a runtime-API kernel (its parameter types are known)");
  // + 1: never a zero-length array, whose data() is null (a kernel without parameters has sizes all the same).
  std::array<void*, sizeof...(Args) + 1> ptrs{const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  std::array<std::size_t, sizeof...(Args) + 1> sizes{sizeof(std::decay_t<Args>)..., 0};
  r.kernel_id = k.id();
  r.driver_kernel = &k;
  r.args = ptrs.data();
  r.arg_sizes = sizes.data();
  r.arg_count = sizeof...(Args);
  if constexpr (std::is_same_v<R, launch_request>) r.has_arguments = true;  // a probe is always a launch's
  return launch(r);
}
}  // namespace detail

// Driver-API kernel: each argument is passed as one kernel parameter (a struct too: a kernel may take one by
// value; lf::args(aggregate) from launchfit/args.hpp passes an aggregate's fields instead). Argument count
// and sizes are checked against cuFuncGetParamInfo where the driver reports them.
// Arguments are taken by value, as a function call takes them (an array argument is a pointer to it).
template <class Policy, class... Args>
inline launched launch(const kernel& k, const spec<Policy>& s, Args... args) {
  detail::launch_probe r = detail::make_probe(s);
  return detail::launch_driver(r, k, std::forward<Args>(args)...);
}

// The same for a driver-API kernel.
template <class Policy>
const plan& plan_for(const kernel& k, const spec<Policy>& s) {
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = k.id();
  r.driver_kernel = &k;
  return detail::plan_for(r);
}

}  // namespace launchfit

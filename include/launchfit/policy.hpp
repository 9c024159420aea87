// SPDX-License-Identifier: MIT
#pragma once
// launchfit::policy — the extension point that turns a query into a plan, the built-in policies, and the
// registry that makes policies selectable by name at run time. Light to include: the machinery that hashes,
// prints and parses policy parameters (Boost.PFR) is in launchfit/param_policy.hpp, for policy authors.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/export.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"

namespace launchfit {

// Everything a policy may look at. The occupancy oracle is the driver on a GPU and the offline calculator
// in tests, so policies are pure logic.
struct LAUNCHFIT_API query {
  device_limits device;                // the device of the launch's context
  kernel_resources kernel;             // the kernel's resources
  std::size_t dynamic_smem_bytes = 0;  // used when smem_per_block is empty
  smem_per_block_fn smem_per_block;    // block threads -> dynamic smem bytes
  work work_hint;                      // the work of the launch that missed the cache
  block_rule blocks;                   // block sizes the kernel can run with: active_blocks_for() is 0 for others
  block_shape shape_rule;              // block shape: active_blocks_for() is 0 for totals it cannot make
  dims cluster;                        // cluster dims of the launch (1x1x1: none)
  // Clusters co-resident on the device for (block threads, dynamic smem) (cuOccupancyMaxActiveClusters); set
  // for cluster launches only. Empty: estimated from active_blocks.
  std::function<int(int, std::size_t)> active_clusters;
  std::size_t bytes_in_flight_per_sm = 0;  // device default target (per-arch table or calibration)
  // Active blocks per SM for (block threads, dynamic smem). Empty: the offline calculator is used.
  std::function<int(int, std::size_t)> active_blocks;
  // Times one candidate plan on the real arguments in ms; empty unless the launch allows re-running.
  std::function<double(const plan&)> time_plan;

  // Dynamic smem per block for a block of this many threads, under the launch's smem rule.
  std::size_t smem_for(int block_threads) const {
    return smem_per_block ? smem_per_block(block_threads) : dynamic_smem_bytes;
  }
  // Resident blocks per SM: the oracle, or the calculator when there is none; 0 for a block the launch's
  // block rule (or a multi-dimensional work's 32-thread rows) does not allow.
  int active_blocks_for(int block_threads) const;
  // Whether the launch can run blocks of this many threads (block rule; the block shape, or rows of 32 for
  // 2-D and 3-D work).
  bool allows(int block_threads) const noexcept {
    if (!blocks.allows(block_threads)) return false;
    if (!shape_rule.is_default()) return shape_rule.allows(block_threads);
    return work_hint.rank <= 1 || block_threads % 32 == 0;
  }
  // Co-resident clusters of the launch's cluster dims (the oracle, or an estimate); 0 without a cluster.
  int active_clusters_for(int block_threads) const { return active_clusters_for(block_threads, cluster); }
  // The same for cluster dims `c` (the oracle answers for the launch's own dims only; others are estimated).
  int active_clusters_for(int block_threads, dims c) const;
  // Largest legal block for this kernel on this device (min of launch bounds and device max).
  int max_block_threads() const noexcept;
};

// Turns a query into a plan. Derive from policy_base (or param_policy) rather than from this: see below.
class LAUNCHFIT_API policy {
 public:
  virtual ~policy() = default;
  // Name as written in policy strings, e.g. "bytes_in_flight".
  virtual std::string name() const = 0;
  // Parameters as "k=v,k=v", in declaration order.
  virtual std::string params() const = 0;
  // Stable hash of name and parameters; part of every plan-cache key.
  virtual std::uint64_t hash() const = 0;
  // Extra cache-key component from the work shape (autotune: a size bucket); 0 means n is irrelevant. A
  // policy that reads query::work_hint must return a different bucket for every work it may decide
  // differently for: the bucket is how the plan's identity holds the work.
  virtual std::uint64_t work_bucket(const work&) const { return 0; }
  // Whether the choice depends on the work, i.e. work_bucket() is not the same for every work (the default
  // asks it for a spread of sizes). plan_for() on a spec without work refuses such a policy (errc::missing_work):
  // a later launch with work could choose another block.
  virtual bool depends_on_work() const;
  // Returns a validated plan or throws launchfit::error.
  virtual plan choose(const query& q) const = 0;

  // "name(params)", as in log lines and policy strings.
  std::string to_string() const {
    std::string s = name();
    s += '(';
    s += params();
    s += ')';
    return s;
  }
};

// Base for every policy (spdlog's base_sink pattern): choose() checks the query, calls choose_impl(),
// then validates the plan against the kernel and device and fills in occupancy; authors write only
// the decision.
class LAUNCHFIT_API policy_base : public policy {
 public:
  plan choose(const query& q) const final;

 protected:
  // Fill block (and blocks_per_sm, dynamic smem, cooperative, grid, reason); the rest is completed here.
  virtual plan choose_impl(const query& q) const = 0;
};

// Throws launchfit::error naming the kernel, the plan and the violated limit, or completes the plan
// (block_threads, sm_count, occupancy, dynamic smem, resident clusters). Every plan from any source passes
// through here.
LAUNCHFIT_API void validate_plan(const query& q, plan& p);

// Gives a 1-D block the shape the launch needs: its block shape (query::shape_rule, block_shape::block_for),
// or for multi-dimensional work {32, threads / 32, 1} (rows of one warp, so a row of the work is read
// coalesced). Plans with a 2-D or 3-D block, and 1-D work without a block shape, are left alone.
LAUNCHFIT_API void shape_block(const query& q, plan& p);

namespace detail {
LAUNCHFIT_API std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t v) noexcept;
LAUNCHFIT_API std::uint64_t hash_string(std::string_view s) noexcept;
// Defined in launchfit/param_policy.hpp (Boost.PFR): a policy deriving from param_policy needs that header.
template <class Derived, class Params>
struct param_policy_members;
}  // namespace detail

// A policy whose parameters are a plain aggregate (a `static constexpr std::array<const char*, N> names`
// names its fields): name, parameters and hash come from the aggregate, so a new policy gets cache keys,
// log lines and policy-string parsing for free. Derived classes define choose_impl(). To derive from it,
// include launchfit/param_policy.hpp, which has what name(), params() and hash() need (the built-in
// policies' are compiled into the library).
template <class Derived, class Params>
class LAUNCHFIT_API param_policy : public policy_base {
 public:
  using params_type = Params;  // the parameter aggregate
  // Default parameters.
  param_policy() = default;
  // These parameters.
  explicit param_policy(Params p) : params_(p) {}

  std::string name() const override;
  std::string params() const override;
  std::uint64_t hash() const override;
  // The parameters.
  const Params& parameters() const noexcept { return params_; }

 protected:
  Params params_{};  // the parameters, for choose_impl()
};

// Not inline: for the built-ins (extern templates below) these are compiled into the library only.
template <class Derived, class Params>
std::string param_policy<Derived, Params>::name() const {
  // An "incomplete type" error on these three lines: include param_policy.hpp where the policy is defined.
  return detail::param_policy_members<Derived, Params>::name();  // include param_policy.hpp
}
template <class Derived, class Params>
std::string param_policy<Derived, Params>::params() const {
  return detail::param_policy_members<Derived, Params>::params(params_);  // include param_policy.hpp
}
template <class Derived, class Params>
std::uint64_t param_policy<Derived, Params>::hash() const {
  return detail::param_policy_members<Derived, Params>::hash(params_);  // include param_policy.hpp
}

// ---- built-in policies -------------------------------------------------------------------------------

class LAUNCHFIT_API max_occupancy_policy;
class LAUNCHFIT_API bytes_in_flight_policy;
class LAUNCHFIT_API cooperative_policy;
class LAUNCHFIT_API fixed_policy;
class LAUNCHFIT_API fixed_dims_policy;
class LAUNCHFIT_API planned_policy;
class LAUNCHFIT_API constant_block_policy;  // the ten-line reference policy for authors, in launchfit/param_policy.hpp

// The parameters of a policy that has none.
struct LAUNCHFIT_API no_params {
  static constexpr std::array<const char*, 0> names{};  // field names, in order
};

// max_occupancy()'s parameters.
struct LAUNCHFIT_API max_occupancy_params {
  // Among the block sizes with the most resident threads, the one nearest prefer_block. 0: the largest, which is
  // exactly cuOccupancyMaxPotentialBlockSize's choice. On an H200, 1024-thread blocks ran one-item-per-thread
  // streaming kernels 16-18% slower than 192-512-thread blocks at the same occupancy, hence 256.
  int prefer_block = 256;
  int block_limit = 0;  // largest block to consider (cuOccupancyMaxPotentialBlockSize's blockSizeLimit); 0: none
  static constexpr std::array<const char*, 2> names{"prefer_block", "block_limit"};  // field names, in order
};

// The most resident threads per SM, as cuOccupancyMaxPotentialBlockSize maximises them (honouring a
// block -> smem rule); see max_occupancy_params for the tie-break. Small work first fills the SMs: when its
// blocks would leave SMs idle (16,384 threads in 256-thread blocks: 64 blocks on 132 SMs), the largest block
// that gives at least 95% of the SMs a block (128 threads: 128 blocks). Small sizes are planned per power of
// two (work_bucket), from the smallest size of each. max_occupancy(0) is exactly the driver's choice for every
// work: it never depends on the work.
class LAUNCHFIT_API max_occupancy_policy final : public param_policy<max_occupancy_policy, max_occupancy_params> {
 public:
  static constexpr const char* policy_name = "max_occupancy";  // its name in policy strings
  using param_policy::param_policy;
  std::uint64_t work_bucket(const work& w) const override;

 protected:
  plan choose_impl(const query& q) const override;
};

// bytes_in_flight()'s parameters.
struct LAUNCHFIT_API bytes_in_flight_params {
  int per_thread = 16;     // bytes each thread keeps in flight (independent loads x width)
  int target_per_sm = 0;   // bytes per SM to keep in flight; 0: the device default
  int prefer_block = 256;  // among the plans with the fewest warps, the block nearest this; 0: the largest
  static constexpr std::array<const char*, 3> names{"per_thread", "target_per_sm",
                                                    "prefer_block"};  // field names, in order
};

// Little's law: the fewest resident warps with warps x 32 x per_thread >= target_per_sm. On an H200
// ~32 KB/SM in flight reached ~97% of peak read bandwidth. If even max occupancy falls short, it uses
// max occupancy and the plan's reason carries the shortfall (a warning when per_thread is above 4 B: more
// loads per thread would help). Width-aware: a grid_stride kernel with 12 B or more per thread launches the
// full grid (one element per thread), where capping it at the resident blocks cost 9-48% on an H200; small
// work fills the SMs first, as max_occupancy does.
class LAUNCHFIT_API bytes_in_flight_policy final : public param_policy<bytes_in_flight_policy, bytes_in_flight_params> {
 public:
  static constexpr const char* policy_name = "bytes_in_flight";  // its name in policy strings
  using param_policy::param_policy;
  std::uint64_t work_bucket(const work& w) const override;

 protected:
  plan choose_impl(const query& q) const override;
};

// cooperative()'s parameters.
struct LAUNCHFIT_API cooperative_params {
  int blocks_per_sm = 0;  // 0: as many as co-reside
  int block = 0;          // 0: the max-occupancy block
  static constexpr std::array<const char*, 2> names{"blocks_per_sm", "block"};  // field names, in order
};

// Grid = co-resident blocks per SM x SMs of the current context, launched cooperatively.
class LAUNCHFIT_API cooperative_policy final : public param_policy<cooperative_policy, cooperative_params> {
 public:
  static constexpr const char* policy_name = "cooperative";  // its name in policy strings
  using param_policy::param_policy;

 protected:
  plan choose_impl(const query& q) const override;
};

// fixed(block, grid)'s parameters.
struct LAUNCHFIT_API fixed_params {
  int block = 256;  // block threads
  int grid = 0;  // 0: computed from the work shape
  static constexpr std::array<const char*, 2> names{"block", "grid"};  // field names, in order
};

// Today's <<<grid, block>>> numbers, validated.
class LAUNCHFIT_API fixed_policy final : public param_policy<fixed_policy, fixed_params> {
 public:
  static constexpr const char* policy_name = "fixed";  // its name in policy strings
  using param_policy::param_policy;

 protected:
  plan choose_impl(const query& q) const override;
};

// fixed(dims, dims)'s parameters: a 2-D or 3-D block and grid.
struct LAUNCHFIT_API fixed_dims_params {
  int bx = 32;  // block x
  int by = 8;   // block y
  int bz = 1;   // block z
  int gx = 0;   // grid x; 0: computed from the work per dimension
  int gy = 1;   // grid y
  int gz = 1;   // grid z
  static constexpr std::array<const char*, 6> names{"bx", "by", "bz",
                                                    "gx", "gy", "gz"};  // field names, in order
};

// A 2-D or 3-D <<<grid, block>>>, validated: fixed({32, 32}) for a 32x32-tile kernel.
class LAUNCHFIT_API fixed_dims_policy final : public param_policy<fixed_dims_policy, fixed_dims_params> {
 public:
  static constexpr const char* policy_name = "fixed_dims";  // its name in policy strings
  using param_policy::param_policy;

 protected:
  plan choose_impl(const query& q) const override;
};

// planned(p)'s parameters: the plan's shape.
struct LAUNCHFIT_API planned_params {
  int bx = 0;                  // block x
  int by = 1;                  // block y
  int bz = 1;                  // block z
  int gx = 0;                  // fixed grid x; 0: computed from the work
  int gy = 1;                  // fixed grid y
  int gz = 1;                  // fixed grid z
  int blocks_per_sm = 0;       // resident blocks per SM the plan runs with (caps grid_stride grids)
  int full_grid = 0;           // 1: grid_stride work launches the full grid unless the spec gives waves(k)
  // The field names, in order.
  static constexpr std::array<const char*, 8> names{"bx", "by", "bz", "gx", "gy", "gz", "blocks_per_sm", "full_grid"};
};

// A plan launched verbatim (launchfit::planned(p)): block, grid rule and residency exactly as planned,
// validated again for this kernel and device. LAUNCHFIT_POLICY overrides never replace it: the plan was made
// under them already.
class LAUNCHFIT_API planned_policy final : public param_policy<planned_policy, planned_params> {
 public:
  static constexpr const char* policy_name = "planned";  // its name in policy strings
  using param_policy::param_policy;

 protected:
  plan choose_impl(const query& q) const override;
};

// Built-ins whose param_policy members are compiled into the library (lib/param_policy.cpp).
extern template class param_policy<max_occupancy_policy, max_occupancy_params>;
extern template class param_policy<bytes_in_flight_policy, bytes_in_flight_params>;
extern template class param_policy<cooperative_policy, cooperative_params>;
extern template class param_policy<fixed_policy, fixed_params>;
extern template class param_policy<fixed_dims_policy, fixed_dims_params>;
extern template class param_policy<planned_policy, planned_params>;
extern template class param_policy<constant_block_policy, no_params>;

// Default bytes-in-flight target per SM for a device (per-arch table; calibrate() may override).
LAUNCHFIT_API std::size_t default_bytes_in_flight_per_sm(const device_limits& device);
// Override the default for one architecture (cc, e.g. 90) with a measured value; drops every cached plan
// (no plan key holds the default target).
LAUNCHFIT_API void set_bytes_in_flight_per_sm(int cc, std::size_t bytes);

// ---- registry: policies by name ----------------------------------------------------------------------

using policy_factory =
    std::function<std::shared_ptr<const policy>(const std::map<std::string, std::string>& params)>;

// Thread-safe; throws launchfit::error on a duplicate name. Built-ins and loaded plugins are registered.
LAUNCHFIT_API void register_policy(const std::string& name, policy_factory factory);
// Removes a registered policy; false when there is none of that name.
LAUNCHFIT_API bool unregister_policy(const std::string& name);
// The names of every registered policy.
LAUNCHFIT_API std::vector<std::string> registered_policies();
// Creates a registered policy; throws launchfit::error for an unknown name or a bad parameter.
LAUNCHFIT_API std::shared_ptr<const policy> make_policy(const std::string& name,
                                          const std::map<std::string, std::string>& params = {});

// Registers a param_policy subclass under its policy_name; parameters are parsed by field name via PFR.
template <class P>
void register_policy();

// Parses "bytes_in_flight(per_thread=32)" (also "fixed(block=256,grid=80)", "max_occupancy", "max_occupancy()").
// Errors name the offending character: "policy string 'x(' col 3: expected ')'".
LAUNCHFIT_API std::shared_ptr<const policy> policy_from_string(std::string_view text);

// Per-kernel overrides, "reduce*=bytes_in_flight(per_thread=32);saxpy=fixed(block=256)", read from
// LAUNCHFIT_POLICY on first use (or set here). Globs match the demangled kernel name without its
// parameter list; the first matching entry wins. Bad entries throw launchfit::error pointing at the column.
LAUNCHFIT_API void set_policy_overrides(std::string_view spec);
// The override for a kernel, or nullptr. `matched` receives the glob that matched.
LAUNCHFIT_API std::shared_ptr<const policy> policy_override_for(std::string_view demangled_kernel,
                                                  std::string* matched = nullptr);

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup policies
/// \brief The policy interface (launchfit::policy, launchfit::policy_base) and the built-in policies that the
/// factories hold.
///
// launchfit::policy — the interface that turns a query into a plan, and the built-in policies (the types
// the factories max_occupancy(), bytes_in_flight(), cooperative(), fixed() and planned() hold). Cheap to
// include: the query, the registry and policy strings are in launchfit/policy.hpp, the machinery that
// hashes, prints and parses policy parameters (Boost.PFR) in launchfit/param_policy.hpp.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "launchfit/detail/string_fwd.hpp"
#include "launchfit/export.hpp"
#include "launchfit/work.hpp"

namespace launchfit {

struct plan;   // launchfit/plan.hpp
struct query;  // launchfit/policy.hpp

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
  // asks it for a spread of sizes). A plan such a policy makes for a spec without work says
  // plan::without_work: the same spec with work could run another block (see launchfit/plan.hpp).
  virtual bool depends_on_work() const;
  // Returns a validated plan or throws launchfit::error.
  virtual plan choose(const query& q) const = 0;
  // Whether this is one of launchfit's own policies, which promise what a plugin or a user's policy need not:
  // choose() is a pure, cheap function of the query (no timing, no state), so a stored plan is checked
  // against its answer; it reads the kernel's name only to name it in an error, so a miss need not demangle
  // it; and no plugin sees its objects destroyed, so a parsed policy string may keep one. Each built-in type
  // says so itself.
  virtual bool builtin() const noexcept { return false; }

  // "name(params)", as in log lines and policy strings.
  std::string to_string() const;
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

namespace detail {
// Mixes v into seed: the splitmix64 finaliser on the combined value, cheap and well mixed. Inline, for the
// plan lookup (it hashes its key's eight fields on every launch).
constexpr std::uint64_t mix_hash(std::uint64_t seed, std::uint64_t v) noexcept {
  std::uint64_t x = seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// mix_hash(), exported: programs built against earlier headers call it from their own template code.
LAUNCHFIT_API std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t v) noexcept;
// 64-bit FNV-1a, one byte at a time from its offset basis: the step of every FNV hash launchfit makes (names
// here, stored key fields in lib/text.hpp's field_hash).
inline constexpr std::uint64_t fnv1a_basis = 0xcbf29ce484222325ULL;
constexpr std::uint64_t fnv1a_byte(std::uint64_t h, unsigned char b) noexcept { return (h ^ b) * 0x100000001b3ULL; }
// FNV-1a of a name: hash_string()'s value (hash_string() is this function), at compile time for the
// built-in policies' names.
constexpr std::uint64_t hash_text(const char* s, std::size_t n) noexcept {
  std::uint64_t h = fnv1a_basis;
  for (std::size_t i = 0; i < n; ++i) h = fnv1a_byte(h, static_cast<unsigned char>(s[i]));
  return h;
}
constexpr std::size_t text_length(const char* s) noexcept {
  std::size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}
// A built-in policy's hash (every parameter an int): its name's hash, then each parameter mixed in as
// params_hash() mixes a field (the std::hash of an int is its value), inline so that a launch whose
// parameters are constants hashes nothing at run time. policy-test checks it against params_hash().
template <class Derived, class Params>
std::uint64_t builtin_hash(const Params& p) noexcept {
  constexpr std::size_t n = Params::names.size();
  // Every parameter an int, in declaration order (what Boost.PFR walks): the size says so for the count, and
  // policy-test compares every built-in's hash with params_hash() for the types.
  static_assert(n > 0 && sizeof(Params) == n * sizeof(int) && std::is_trivially_copyable_v<Params>,
                "builtin_hash: a built-in policy's parameters are ints");
  constexpr std::uint64_t name = hash_text(Derived::policy_name, text_length(Derived::policy_name));
  int v[n];
  std::memcpy(v, &p, sizeof v);
  std::uint64_t h = name;
  for (std::size_t i = 0; i < n; ++i) h = mix_hash(h, static_cast<std::size_t>(v[i]));
  return h;
}
// Small work: per power of two of the threads it needs, below 2^18 (a few waves of any block on any GPU);
// 0 for larger work, 2-D and 3-D work and work of other kinds. max_occupancy() and bytes_in_flight() plan per
// bucket (their work_bucket()).
constexpr std::uint64_t small_work_bucket(const work& w) noexcept {
  if (w.kind != work::shape::items && w.kind != work::shape::grid_stride) return 0;
  if (w.rank > 1) return 0;
  const std::uint64_t k = w.per_thread > 1 ? w.per_thread : 1;
  const std::uint64_t threads = w.n / k + (w.n % k != 0);
  if (threads == 0 || threads >= (1u << 18)) return 0;
  std::uint64_t bucket = 1;
  for (std::uint64_t t = threads; t > 1; t >>= 1) ++bucket;
  return bucket;  // floor(log2(threads)) + 1
}
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

// ---- built-in policies -------------------------------------------------------------------------------

class LAUNCHFIT_API max_occupancy_policy;
class LAUNCHFIT_API bytes_in_flight_policy;
class LAUNCHFIT_API cooperative_policy;
class LAUNCHFIT_API fixed_policy;
class LAUNCHFIT_API fixed_dims_policy;
class LAUNCHFIT_API planned_policy;
// The ten-line reference policy for authors, in launchfit/param_policy.hpp.
class LAUNCHFIT_API constant_block_policy;

// The parameters of a policy that has none.
struct LAUNCHFIT_API no_params {
  static constexpr std::array<const char*, 0> names{};  // field names, in order
};

// max_occupancy()'s parameters.
struct LAUNCHFIT_API max_occupancy_params {
  // Among the block sizes with the most resident threads, the one nearest prefer_block. 0: the largest, which
  // is exactly cuOccupancyMaxPotentialBlockSize's choice. On an H200, 1024-thread blocks ran
  // one-item-per-thread streaming kernels 16-18% slower than 192-512-thread blocks at the same occupancy,
  // hence 256.
  int prefer_block = 256;
  // The largest block to consider (cuOccupancyMaxPotentialBlockSize's blockSizeLimit); 0: none.
  int block_limit = 0;
  static constexpr std::array<const char*, 2> names{"prefer_block", "block_limit"};  // field names, in order
};

// The most resident threads per SM, as cuOccupancyMaxPotentialBlockSize maximises them (honouring a
// block -> smem rule); see max_occupancy_params for the tie-break. Small work first fills the SMs: when its
// blocks would leave SMs idle (16,384 threads in 256-thread blocks: 64 blocks on 132 SMs), the largest block
// that gives at least 95% of the SMs a block (128 threads: 128 blocks). Small sizes are planned per power of
// two (work_bucket), from the smallest size of each. max_occupancy(0) is exactly the driver's choice for
// every work: it never depends on the work.
class LAUNCHFIT_API max_occupancy_policy final
    : public param_policy<max_occupancy_policy, max_occupancy_params> {
 public:
  static constexpr const char* policy_name = "max_occupancy";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<max_occupancy_policy>(params_); }
  std::uint64_t work_bucket(const work& w) const override;  // bucket_of(parameters(), w)
  // The size bucket of these parameters' plans (inline, for a launch of constant parameters): small work per
  // power of two of its threads; 0 for max_occupancy(0), exactly the driver's block for any work.
  static constexpr std::uint64_t bucket_of(const max_occupancy_params& p, const work& w) noexcept {
    return p.prefer_block == 0 ? 0 : detail::small_work_bucket(w);
  }

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
// loads per thread would help). grid_stride work gets one wave of resident blocks whatever the width (more
// only with waves(k) or a tuned plan: a block ending in costly work costs per block, which no policy sees);
// small work fills the SMs first, as max_occupancy does.
class LAUNCHFIT_API bytes_in_flight_policy final
    : public param_policy<bytes_in_flight_policy, bytes_in_flight_params> {
 public:
  static constexpr const char* policy_name = "bytes_in_flight";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<bytes_in_flight_policy>(params_); }
  std::uint64_t work_bucket(const work& w) const override;  // bucket_of(parameters(), w)
  // The size bucket of these parameters' plans (inline, for a launch of constant parameters): small work per
  // power of two of its threads.
  static constexpr std::uint64_t bucket_of(const bytes_in_flight_params&, const work& w) noexcept {
    return detail::small_work_bucket(w);
  }

 protected:
  plan choose_impl(const query& q) const override;
};

// cooperative()'s parameters.
struct LAUNCHFIT_API cooperative_params {
  int blocks_per_sm = 0;                                                        // 0: as many as co-reside
  // 0: the max-occupancy block; with blocks_per_sm given, the largest block with the most threads resident at
  // that many blocks per SM (cooperative(1): the largest block that fits).
  int block = 0;
  static constexpr std::array<const char*, 2> names{"blocks_per_sm", "block"};  // field names, in order
};

// Grid = co-resident blocks per SM x SMs of the current context, launched cooperatively.
class LAUNCHFIT_API cooperative_policy final : public param_policy<cooperative_policy, cooperative_params> {
 public:
  static constexpr const char* policy_name = "cooperative";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<cooperative_policy>(params_); }

 protected:
  plan choose_impl(const query& q) const override;
};

// fixed(block, grid)'s parameters.
struct LAUNCHFIT_API fixed_params {
  int block = 256;                                                     // block threads
  int grid = 0;                                                        // 0: computed from the work shape
  static constexpr std::array<const char*, 2> names{"block", "grid"};  // field names, in order
};

// Today's <<<grid, block>>> numbers, validated.
class LAUNCHFIT_API fixed_policy final : public param_policy<fixed_policy, fixed_params> {
 public:
  static constexpr const char* policy_name = "fixed";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<fixed_policy>(params_); }

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
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<fixed_dims_policy>(params_); }

 protected:
  plan choose_impl(const query& q) const override;
};

// planned(p)'s parameters: the plan's shape.
struct LAUNCHFIT_API planned_params {
  int bx = 0;             // block x
  int by = 1;             // block y
  int bz = 1;             // block z
  int gx = 0;             // fixed grid x; 0: computed from the work
  int gy = 1;             // fixed grid y
  int gz = 1;             // fixed grid z
  int blocks_per_sm = 0;  // resident blocks per SM the plan runs with (caps grid_stride grids)
  int full_grid = 0;      // 1: grid_stride work launches the full grid unless the spec gives waves(k)
  // The field names, in order.
  static constexpr std::array<const char*, 8> names{"bx",       "by", "bz", "gx", "gy", "gz", "blocks_per_sm",
                                                    "full_grid"};
};

// A plan launched verbatim (launchfit::planned(p)): block, grid rule and residency exactly as planned,
// validated again for this kernel and device. LAUNCHFIT_POLICY overrides never replace it: the plan was made
// under them already.
class LAUNCHFIT_API planned_policy final : public param_policy<planned_policy, planned_params> {
 public:
  static constexpr const char* policy_name = "planned";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }
  std::uint64_t hash() const override { return detail::builtin_hash<planned_policy>(params_); }

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

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// A plan (launchfit/plan.hpp) as text, and grid_for(): the grid of one launch from its plan and its work,
// the only arithmetic a launch does per call.

#include "launchfit/plan.hpp"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "launchfit/error.hpp"
#include "grid_bound.hpp"
#include "plan_description.hpp"

namespace launchfit {

namespace detail {
std::string items_text(const work& w) {
  if (w.rank <= 1) return "items(" + std::to_string(w.n) + ")";
  std::string s = "items({" + std::to_string(w.n) + ", " + std::to_string(w.ny);
  if (w.rank == 3) s += ", " + std::to_string(w.nz);
  return s + "})";
}
}  // namespace detail

// "block=256 blocks_per_sm=8 sm_count=132 dynamic_smem_bytes=0 occupancy=100% limiters=warps policy=..."
std::string plan::to_string() const {
  return detail::fields_text(detail::describe_plan(*this, detail::plan_forms::text), detail::shown::everywhere);
}

namespace {

std::uint64_t ceil_div(std::uint64_t n, std::uint64_t d) noexcept {
  // 32-bit when both fit (a 64-bit divide costs several times more on common x86 cores).
  if (((n | d) >> 32) == 0) {
    const auto n32 = static_cast<std::uint32_t>(n), d32 = static_cast<std::uint32_t>(d);
    return n32 / d32 + (n32 % d32 != 0);
  }
  return n / d + (n % d != 0);
}

// Saturates where the multiple would not fit (a count near 2^64 rounded up to whole clusters): the grid is then
// refused as above the device's limit, never wrapped to an empty grid that launches nothing.
std::uint64_t round_up(std::uint64_t v, unsigned multiple) noexcept {
  if (multiple <= 1) return v;
  const std::uint64_t q = ceil_div(v, multiple);
  return q > UINT64_MAX / multiple ? UINT64_MAX - UINT64_MAX % multiple : q * multiple;
}

constexpr std::uint64_t max_grid_yz = 65535;  // every CUDA device

// In the driver's terms (what cuLaunchKernelEx would return) where the driver has one, else launchfit's.
[[noreturn]] void grid_error(const plan& p, CUresult code, const std::string& what) {
  throw error(code, "grid_for", what, {}, p.to_string());
}
[[noreturn]] void grid_error(const plan& p, errc code, const std::string& what) {
  throw error(code, "grid_for", what, {}, p.to_string());
}

using detail::items_text;

// A caller's grid: every dimension within the device's limits and made of whole clusters.
dims caller_grid(const plan& p, const work& w, long long max_grid_x) {
  const dims g = w.grid;
  if (g.x == 0 || g.y == 0 || g.z == 0) return dims{0, 1, 0};
  if (g.x > static_cast<unsigned long long>(max_grid_x) || g.y > max_grid_yz || g.z > max_grid_yz) {
    grid_error(p, CUDA_ERROR_INVALID_VALUE,
               "grid " + g.to_string() + " exceeds the device's grid limits (" + std::to_string(max_grid_x) +
                   " x 65535 x 65535)");
  }
  if (p.options.cluster.count() > 1 && (g.x % p.options.cluster.x || g.y % p.options.cluster.y || g.z % p.options.cluster.z)) {
    grid_error(p, CUDA_ERROR_INVALID_CLUSTER_SIZE,
               "grid " + g.to_string() + " is not made of whole clusters of " + p.options.cluster.to_string());
  }
  return g;
}

}  // namespace

namespace {
dims grid_for_any(const plan& p, const work& w, long long max_grid_x);
}  // namespace

dims grid_for(const plan& p, const work& w, long long max_grid_x) {
  // The common launch first, as grid_for_any() sizes it: 1-D items(n) of a computed grid, no block shape,
  // cluster (grid_for_any() rounds x up to cluster.x even where another dimension is 0) or co-residency to
  // check; at most one division, the frame of the error paths never set up.
  if (w.kind == work::shape::items && w.rank <= 1 && p.grid.x == 0 && !p.without_work && p.block_threads > 0 &&
      !p.options.cooperative && p.options.cluster.x <= 1 && !p.options.has_cluster() && p.shape_rule.is_default() &&
      w.n != 0 && w.ny != 0 && w.nz != 0) {
    const std::uint64_t per_block =
        static_cast<std::uint64_t>(p.block_threads) * std::max<std::uint32_t>(w.per_thread, 1);
    // A power-of-two block (most are) needs no division, whose latency is most of this path's.
    const std::uint64_t gx = (per_block & (per_block - 1)) == 0
                                 ? (w.n >> __builtin_ctzll(per_block)) + ((w.n & (per_block - 1)) != 0)
                                 : ceil_div(w.n, per_block);
    if (gx <= static_cast<std::uint64_t>(max_grid_x)) return dims{static_cast<unsigned>(gx), 1, 1};
  }
  return grid_for_any(p, w, max_grid_x);
}

namespace {
__attribute__((noinline)) dims grid_for_any(const plan& p, const work& w, long long max_grid_x) {
  if (p.without_work && (w.kind == work::shape::items || w.kind == work::shape::grid_stride)) {
    // The plan-then-launch pattern kept safe: this plan answers the spec without work, and its policy would
    // plan the spec with this work by the work (small work fills the SMs with smaller blocks).
    grid_error(
        p, errc::missing_work,
        "this plan was made for a spec without work by " + p.policy +
            ", which chooses the block by the work: the same spec with " +
            (w.kind == work::shape::grid_stride ? "grid_stride(" + std::to_string(w.n) + ")"
                                                : items_text(w)) +
            " may run another block. Plan with the work (plan_for(k, spec.items(n))), or launch this plan "
            "verbatim (planned(p).items(n)) and size with plan_for(k, planned(p).items(n))");
  }
  // items(0) / grid_stride(0): nothing to do, whatever the plan (a fixed grid too). A documented no-op.
  if (w.kind == work::shape::items || w.kind == work::shape::grid_stride) {
    if (w.n == 0 || w.ny == 0 || w.nz == 0) return dims{0, 1, 0};
  }
  const long long resident = p.resident_blocks();
  dims g;
  if (w.kind == work::shape::grid) {
    g = caller_grid(p, w, max_grid_x);
  } else if (p.grid.x != 0) {
    // A policy's fixed grid, validated when the plan was made; where the launch bounds its grid (an SM budget,
    // a waves cap), within that bound (a plan made elsewhere is held to it here).
    if (std::string why = detail::fixed_grid_past_bound(p, w); !why.empty()) grid_error(p, errc::invalid_plan, why);
    return p.grid;
  } else if (p.block_threads <= 0) {
    grid_error(p, errc::invalid_plan, "plan without a block");
  } else if (w.kind == work::shape::none) {
    // Whole clusters: resident is a multiple of the cluster's blocks, laid out as clusters in x.
    const dims& c = p.options.cluster;
    const long long yz = static_cast<long long>(std::max(c.y, 1u)) * std::max(c.z, 1u);
    if (resident <= 0 || resident % (yz * std::max(c.x, 1u)) != 0) {
      grid_error(p, errc::invalid_plan,
                 "the plan's resident grid of " + std::to_string(resident) + " blocks is not one of whole " +
                     (c.count() > 1 ? "clusters of " + c.to_string() : std::string("blocks")));
    }
    g = dims{static_cast<unsigned>(resident / yz), std::max(c.y, 1u), std::max(c.z, 1u)};
  } else {
    // With a block shape the block's x covers x (1-D work too); without, a 1-D work's block is its threads.
    const bool shaped = !p.shape_rule.is_default();
    const unsigned bx = w.rank <= 1 && !shaped ? static_cast<unsigned>(p.block_threads) : p.block.x;
    const std::uint64_t per_block = static_cast<std::uint64_t>(bx) * std::max<std::uint32_t>(w.per_thread, 1);
    const std::uint64_t rows =
        static_cast<std::uint64_t>(p.block.y) * std::max<std::uint32_t>(p.shape_rule.per_thread_y, 1);
    const std::uint64_t cx = std::max(p.options.cluster.x, 1u);
    std::uint64_t gx = round_up(ceil_div(w.n, per_block), p.options.cluster.x);
    std::uint64_t gy = w.rank >= 2 ? round_up(ceil_div(w.ny, rows), p.options.cluster.y) : 1;
    std::uint64_t gz = w.rank >= 3 ? round_up(ceil_div(w.nz, p.block.z), p.options.cluster.z) : 1;
    // The full grid never where a waves cap or an SM budget bounds the grid (a stored or tuned plan may say
    // full_grid for any grid_stride launch).
    if (w.kind == work::shape::grid_stride && (!p.full_grid || w.waves != 0 || p.options.sm_budget > 0)) {
      const std::uint64_t cap = static_cast<std::uint64_t>(resident) * std::max<std::uint32_t>(w.waves, 1);
      gx = std::max<std::uint64_t>(std::min<std::uint64_t>(gx, cap / cx * cx), cx);  // whole clusters
    } else if (w.kind == work::shape::grid_stride) {
      // Full grid: the loop covers the rest (whole clusters of the largest grid).
      gx = std::min<std::uint64_t>(gx, static_cast<std::uint64_t>(max_grid_x) / cx * cx);
    }
    // (Two divisions a launch without a cluster need not pay.)
    if (p.options.has_cluster() && ((gy % p.options.cluster.y) != 0 || (gz % p.options.cluster.z) != 0)) {
      grid_error(p, CUDA_ERROR_INVALID_CLUSTER_SIZE,
                 "cluster " + p.options.cluster.to_string() + " needs a grid whose y and z are multiples of " +
                     std::to_string(p.options.cluster.y) + " and " + std::to_string(p.options.cluster.z) +
                     ": give the work in " + (p.options.cluster.z > 1 ? "3" : "2") + " dimensions, items({nx, ny" +
                     (p.options.cluster.z > 1 ? ", nz" : "") + "})");
    }
    if (gx > static_cast<std::uint64_t>(max_grid_x)) {
      grid_error(p, CUDA_ERROR_INVALID_VALUE,
                 items_text(w) + " with " + std::to_string(per_block) + " items per block needs " +
                     std::to_string(gx) + " blocks, above the grid limit " + std::to_string(max_grid_x) +
                     "; use grid_stride() or per_thread()");
    }
    if (gy > max_grid_yz || gz > max_grid_yz) {
      grid_error(p, CUDA_ERROR_INVALID_VALUE,
                 items_text(w) + " with block " + p.block.to_string() + " needs " + std::to_string(gy) +
                     " x " + std::to_string(gz) + " blocks in y and z, above the grid limit 65535");
    }
    g = dims{static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)};
  }
  if (p.options.cooperative && static_cast<long long>(g.count()) > resident) {
    grid_error(
        p, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        (w.kind == work::shape::grid ? "grid " + g.to_string() : items_text(w)) + " needs " +
            std::to_string(g.count()) + " blocks but only " + std::to_string(resident) + " co-reside" +
            (w.kind == work::shape::grid ? std::string() : "; use grid_stride() or more items per thread"));
  }
  return g;
}
}  // namespace

namespace detail {

std::string fixed_grid_past_bound(const plan& p, const work& w) {
  if (p.grid.x == 0 || (w.kind != work::shape::grid_stride && w.kind != work::shape::none)) return {};
  if (p.options.sm_budget <= 0 && w.waves == 0) return {};
  const long long bound = p.resident_blocks() * std::max<std::uint32_t>(w.waves, 1);
  if (static_cast<long long>(p.grid.count()) <= bound) return {};
  return "the fixed grid " + p.grid.to_string() + " exceeds the " + std::to_string(bound) +
         " blocks the launch bounds its grid to (" +
         (p.options.sm_budget > 0 ? "an SM budget of " + std::to_string(p.options.sm_budget) + " SMs"
                                  : std::string("no SM budget")) +
         (w.waves != 0 ? ", " + std::to_string(w.waves) + " waves" : std::string()) + ")";
}

}  // namespace detail

}  // namespace launchfit

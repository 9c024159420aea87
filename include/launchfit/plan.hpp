#pragma once
// launchfit::plan — what a policy decided for one (device, kernel, policy, smem rule), and the work shape
// that turns a plan into a grid at launch time.

#include <cstddef>
#include <cstdint>
#include <string>

#include "launchfit/occupancy.hpp"

namespace launchfit {

struct dims {
  unsigned x = 1, y = 1, z = 1;
  constexpr unsigned long long count() const noexcept {
    return static_cast<unsigned long long>(x) * y * z;
  }
  friend constexpr bool operator==(dims a, dims b) noexcept { return a.x == b.x && a.y == b.y && a.z == b.z; }
  friend constexpr bool operator!=(dims a, dims b) noexcept { return !(a == b); }
  std::string to_string() const;  // "256" or "16x16" or "8x8x4"
};

// The work a launch covers. The plan never depends on n; the grid is computed from it per launch.
struct work {
  enum class shape : std::uint8_t {
    none,         // no work given: one full wave of resident blocks (blocks_per_sm x SMs)
    items,        // one thread per `per_thread` items: grid = ceil(n / (block x per_thread))
    grid_stride,  // the kernel loops: grid = min(ceil(n / (block x per_thread)), resident blocks)
  };
  shape kind = shape::none;
  std::uint64_t n = 0;
  std::uint32_t per_thread = 1;
};

struct plan {
  dims block;
  int block_threads = 0;         // block.count()
  int blocks_per_sm = 0;         // resident blocks per SM this plan runs with (caps grid_stride grids)
  int sm_count = 0;              // SMs of the context the plan was made for
  std::size_t dynamic_smem_bytes = 0;
  dims grid{0, 1, 1};            // fixed grids only (grid.x == 0: computed from the work)
  dims cluster;                  // thread-block cluster dims (1x1x1: none)
  bool cooperative = false;
  occupancy_result occupancy;    // at block_threads and dynamic_smem_bytes
  std::string policy;            // "bytes_in_flight(per_thread=32,target_per_sm=32768)"
  std::string reason;            // why the policy chose this, one sentence
  std::string warning;           // set when the policy could not meet its goal (logged once as a warning)
  std::string match = "computed";  // computed | cache-file | cache-file-other-bucket | fallback
  int trials = 0;                // candidate plans timed (autotune)
  double tuning_ms = 0;

  // Resident-block cap: blocks_per_sm x sm_count.
  long long resident_blocks() const noexcept { return static_cast<long long>(blocks_per_sm) * sm_count; }
  // "block=256 grid=items blocks/SM=8 smem=0 coop=no"
  std::string to_string() const;
};

// Grid for this plan and work, integer arithmetic only. Throws launchfit::error when the grid would exceed
// max_grid_x (e.g. a size_t n too large for the chosen block) or a cooperative grid would not co-reside.
dims grid_for(const plan& p, const work& w, long long max_grid_x = 2147483647LL);

}  // namespace launchfit

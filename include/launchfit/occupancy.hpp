// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup devices
/// \brief The offline occupancy calculator: occupancy, the resource that binds and what to cut for one more
/// block, without a GPU.
///
// launchfit::occupancy — the offline occupancy calculator (no GPU needed), built on NVIDIA's cuda_occupancy.h.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "launchfit/export.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"

namespace launchfit {

// Which resources bind; several bits are set on a tie.
enum limiter : unsigned {
  limit_none = 0,
  limit_warps = 1u << 0,       // threads/warps per SM
  limit_registers = 1u << 1,
  limit_shared_memory = 1u << 2,
  limit_blocks = 1u << 3,      // max resident blocks per SM
  limit_block_size = 1u << 4,  // block larger than the kernel or device allows: nothing fits
  limit_barriers = 1u << 5,
};
// "registers|shared_memory"
LAUNCHFIT_API std::string limiter_names(unsigned limiters);

// Occupancy of one configuration (block threads, dynamic smem) and what limits it.
struct LAUNCHFIT_API occupancy_result {
  int block_threads = 0;               // the block asked about
  std::size_t dynamic_smem_bytes = 0;  // the dynamic smem asked about
  int active_blocks_per_sm = 0;        // resident blocks per SM
  int active_warps_per_sm = 0;         // resident warps per SM
  int active_threads_per_sm = 0;       // resident threads per SM
  double occupancy = 0;        // active warps / max warps, 0..1
  unsigned limiters = 0;       // bitmask of limiter
  // Blocks per SM each resource alone would allow (INT_MAX-like large value when unlimited).
  int blocks_limit_warps = 0;          // by warps per SM
  int blocks_limit_registers = 0;      // by registers per SM
  int blocks_limit_shared_memory = 0;  // by shared memory per SM
  int blocks_limit_blocks = 0;         // by blocks per SM
  // What one block really takes after allocation granularity.
  int allocated_regs_per_block = 0;
  std::size_t allocated_smem_per_block_bytes = 0;  // incl. static + dynamic + reserve, rounded up
  // Why no block fits, in words with the numbers, when a limit of its own rules the block out (today: the
  // registers a block may hold, see register_block_limit); empty otherwise.
  std::string why_no_block;

  // One line: "8 blocks x 256 threads = 64 warps/SM (100%), limited by warps", then why_no_block if any.
  std::string summary() const;
};

// The most threads per block a kernel's registers allow: all of a block's warps hold their registers at once,
// a warp takes regs x warp size rounded up to the allocation unit, and a block's warps are counted in
// multiples of the SM's sub-partitions (as the hardware checks the launch).
struct LAUNCHFIT_API register_block_limit {
  int regs_per_thread = 0;     // the kernel's registers per thread
  int warp_size = 32;          // threads per warp
  int regs_per_warp = 0;       // allocated: regs_per_thread x warp size rounded up to allocation_unit
  int allocation_unit = 0;     // 256 on every supported architecture
  int regs_per_block = 0;      // the device's limit on one block (65536)
  int max_warps = 0;           // warps per block that fit
  int max_threads = 0;         // max_warps x warp size, at most the device's threads per block
  int device_max_threads = 0;  // the device's threads per block: registers bind only below it

  // "168 registers per thread x 32 threads = 5376 registers per warp (in units of 256); 65536 registers per
  // block / 5376 = 12 warps: at most 384 threads per block"
  std::string text() const;
};
// Throws launchfit::error for registers outside 0..the architecture maximum, or an unknown architecture.
LAUNCHFIT_API register_block_limit registers_per_block_limit(const device_limits& device,
                                                             int regs_per_thread);

// Occupancy of one configuration. Throws launchfit::error for impossible inputs (block_threads outside
// 1..max, regs above the architecture maximum, smem above the opt-in maximum).
LAUNCHFIT_API occupancy_result occupancy(const device_limits& device, const kernel_resources& kernel, int block_threads,
                           std::size_t dynamic_smem_bytes);

// Dynamic shared memory as a function of block size (capturing lambdas welcome).
using smem_per_block_fn = std::function<std::size_t(int block_threads)>;

// The block cuOccupancyMaxPotentialBlockSize would choose, computed offline (max_potential_block_size).
struct block_size_choice {
  int block_threads = 0;    // the block with the most resident threads
  int min_grid_blocks = 0;  // active blocks per SM x SM count
  occupancy_result occupancy;  // its occupancy
};

namespace detail {
// cuOccupancyMaxPotentialBlockSize's search over any occupancy oracle (the calculator offline, the driver in
// policies): the block with the most resident threads, stopping early at a full SM. Ties go to the block
// nearest prefer_block (the smaller of two equally near), or with prefer_block = 0 to the larger block, as
// cuOccupancyMaxPotentialBlockSize does. active_blocks(block) returns 0 for blocks that cannot run.
struct potential_block {
  int block_threads = 0;  // 0: no block size fits
  int blocks_per_sm = 0;
};
LAUNCHFIT_API potential_block search_potential_block(int block_limit, int warp_size, int max_threads_per_sm,
                                       const std::function<int(int block_threads)>& active_blocks,
                                       int prefer_block = 0);
// The candidate block sizes of that search (warp multiples up to block_limit, the limit itself when it is
// not one) in the order they are tried: nearest prefer_block first, or from the largest down. One at a time,
// so a search that stops at the first full SM builds no list:
//   for (candidate_block_order order(limit, 32, 256); int block = order.next();) ...
class LAUNCHFIT_API candidate_block_order {
 public:
  candidate_block_order(int block_limit, int warp_size, int prefer_block) noexcept;
  int next() noexcept;  // the next block size; 0 once every size was given

 private:
  int size_at(int i) const noexcept { return i * granularity_ <= top_multiple_ ? i * granularity_ : limit_; }
  int limit_ = 0, granularity_ = 32, top_multiple_ = 0, count_ = 0, prefer_ = 0;
  int lo_ = 0, hi_ = 0;  // next index below (walking down) and above (walking up) prefer_block
};
LAUNCHFIT_API std::vector<int> candidate_blocks(int block_limit, int warp_size, int prefer_block);
// "75%" or "12.5%": one decimal, dropped when it is zero.
LAUNCHFIT_API std::string percent_text(double fraction);
}  // namespace detail

// Same search as cuOccupancyMaxPotentialBlockSize (largest block among those with the most resident
// threads), done offline; block_size_limit 0 means no limit beyond the kernel and device.
LAUNCHFIT_API block_size_choice max_potential_block_size(const device_limits& device, const kernel_resources& kernel,
                                           const smem_per_block_fn& smem = {}, int block_size_limit = 0);

// "How much to cut to gain one more block": the registers per thread and the shared memory per block
// (dynamic part) at or below which one more block becomes resident; -1 when cutting that alone cannot help.
struct one_more_block {
  int target_blocks_per_sm = 0;           // the resident blocks per SM aimed at: one more than now
  int max_regs_per_thread = -1;           // registers per thread at or below which it is reached
  long long max_dynamic_smem_bytes = -1;  // dynamic smem per block at or below which it is reached
};
// Computes one_more_block for a configuration, offline.
LAUNCHFIT_API one_more_block what_to_cut(const device_limits& device, const kernel_resources& kernel, int block_threads,
                           std::size_t dynamic_smem_bytes);

}  // namespace launchfit

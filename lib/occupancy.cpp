// SPDX-License-Identifier: MIT
// The offline occupancy calculator: NVIDIA's cuda_occupancy.h does the arithmetic (it is the driver's own
// model), launchfit adds input checks, the per-resource explanation and the searches built on top.

#include "launchfit/occupancy.hpp"

#include <cuda_occupancy.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "launchfit/error.hpp"

namespace launchfit {
namespace {

[[noreturn]] void invalid(const kernel_resources& kernel, std::string message, std::string config = {}) {
  throw error(errc::invalid_config, "occupancy", std::move(message), kernel.demangled, std::move(config));
}

std::string config_text(int block_threads, std::size_t dynamic_smem_bytes) {
  return "block " + std::to_string(block_threads) + ", dynamic smem " + std::to_string(dynamic_smem_bytes) +
         " B";
}

std::size_t optin_bytes(const device_limits& device) {
  return std::max(device.smem_per_block_optin_bytes, device.smem_per_block_bytes);
}

int max_block_threads(const device_limits& device, const kernel_resources& kernel) {
  return std::min(device.max_threads_per_block, kernel.max_threads_per_block);
}

// What does not depend on the launch configuration.
void check_kernel(const device_limits& device, const kernel_resources& kernel) {
  if (kernel.regs_per_thread < 0 || kernel.regs_per_thread > device.max_regs_per_thread)
    invalid(kernel, std::to_string(kernel.regs_per_thread) + " registers per thread is outside 0.." +
                        std::to_string(device.max_regs_per_thread) + " on " + device.arch());
  if (kernel.static_smem_bytes > optin_bytes(device))
    invalid(kernel, std::to_string(kernel.static_smem_bytes) + " B of static shared memory exceeds the " +
                        std::to_string(optin_bytes(device)) + " B opt-in maximum per block on " +
                        device.arch());
  if (kernel.max_threads_per_block < 1)
    invalid(kernel, "the kernel allows no threads per block (max_threads_per_block " +
                        std::to_string(kernel.max_threads_per_block) + ")");
}

void check_config(const device_limits& device, const kernel_resources& kernel, int block_threads,
                  std::size_t dynamic_smem_bytes) {
  check_kernel(device, kernel);
  auto config = [&] { return config_text(block_threads, dynamic_smem_bytes); };  // only for an error
  if (block_threads < 1) invalid(kernel, "a block needs at least 1 thread", config());
  if (block_threads > device.max_threads_per_block)
    invalid(kernel,
            "block of " + std::to_string(block_threads) + " threads exceeds the device maximum of " +
                std::to_string(device.max_threads_per_block) + " threads per block",
            config());
  if (block_threads > kernel.max_threads_per_block)
    invalid(kernel,
            "block of " + std::to_string(block_threads) + " threads exceeds the kernel's maximum of " +
                std::to_string(kernel.max_threads_per_block) +
                " threads per block (its __launch_bounds__ or register use)",
            config());
  const std::size_t optin = optin_bytes(device);
  if (dynamic_smem_bytes > optin || kernel.static_smem_bytes + dynamic_smem_bytes > optin)
    invalid(kernel,
            std::to_string(kernel.static_smem_bytes) + " B static + " + std::to_string(dynamic_smem_bytes) +
                " B dynamic shared memory exceeds the " + std::to_string(optin) +
                " B opt-in maximum per block on " + device.arch(),
            config());
}

// A field set here (or in occ_function()) is one the occupancy memo keys: key_of() below names each.
cudaOccDeviceProp occ_device(const device_limits& device) {
  cudaOccDeviceProp p;
  p.computeMajor = device.cc_major;
  p.computeMinor = device.cc_minor;
  p.maxThreadsPerBlock = device.max_threads_per_block;
  p.maxThreadsPerMultiprocessor = device.max_threads_per_sm;
  p.regsPerBlock = device.regs_per_block;
  p.regsPerMultiprocessor = device.regs_per_sm;
  p.warpSize = device.warp_size;
  p.sharedMemPerBlock = device.smem_per_block_bytes;
  p.sharedMemPerMultiprocessor = device.smem_per_sm_bytes;
  p.numSms = std::max(device.sm_count, 1);  // per-SM results do not depend on it, the input check does
  p.sharedMemPerBlockOptin = optin_bytes(device);
  p.reservedSharedMemPerBlock = device.smem_reserved_per_block_bytes;
  return p;
}

// The default constructor describes a function that never opted in to more than 48 KB, which the
// driver does not assume: it agrees only with the opt-in limit and the real maximum (DESIGN.md). One
// block barrier, as for every compiled kernel (cudaFuncAttributes' conversion says the same).
cudaOccFuncAttributes occ_function(const device_limits& device, const kernel_resources& kernel) {
  cudaOccFuncAttributes f;
  f.maxThreadsPerBlock = kernel.max_threads_per_block;
  f.numRegs = kernel.regs_per_thread;
  f.sharedSizeBytes = kernel.static_smem_bytes;
  f.partitionedGCConfig = PARTITIONED_GC_OFF;
  f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  f.maxDynamicSharedSizeBytes = optin_bytes(device);
  f.numBlockBarriers = 1;
  return f;
}

// cuda_occupancy.h's last answer on this thread, by every input it reads: a plan asks one block's residency up to
// three times (the policy's search, its plan, validation), each a full calculation. The key is each field of the
// three input structs widened to 64 bits (no padding compared). Every field occ_device(), occ_function() and the
// state set is keyed; a field a later toolkit adds keeps its header default in every call (the same in all, so
// no answer is taken for another's inputs) until occ_*() set it, which must then key it too. The size checks catch
// a struct that grows past its padding; one that fills a padding hole keeps its size and is caught by nothing
// here.
static_assert(sizeof(cudaOccDeviceProp) == 7 * sizeof(int) + 4 + 2 * sizeof(std::size_t) + sizeof(int) + 4 +
                                               2 * sizeof(std::size_t),
              "cuda_occupancy.h's cudaOccDeviceProp changed: key every field of it in occupancy_key()");
static_assert(sizeof(cudaOccFuncAttributes) ==
                  2 * sizeof(int) + sizeof(std::size_t) + 2 * sizeof(int) + sizeof(std::size_t) + 2 * sizeof(int),
              "cuda_occupancy.h's cudaOccFuncAttributes changed: key every field of it in occupancy_key()");
static_assert(sizeof(cudaOccDeviceState) == 2 * sizeof(int),
              "cuda_occupancy.h's cudaOccDeviceState changed: key every field of it in occupancy_key()");
using occupancy_key = std::array<std::uint64_t, 24>;
occupancy_key key_of(const cudaOccDeviceProp& d, const cudaOccFuncAttributes& f, const cudaOccDeviceState& s,
                     int block_threads, std::size_t dynamic_smem_bytes) {
  const auto u = [](auto v) { return static_cast<std::uint64_t>(v); };
  return {u(d.computeMajor), u(d.computeMinor), u(d.maxThreadsPerBlock), u(d.maxThreadsPerMultiprocessor),
          u(d.regsPerBlock), u(d.regsPerMultiprocessor), u(d.warpSize), u(d.sharedMemPerBlock),
          u(d.sharedMemPerMultiprocessor), u(d.numSms), u(d.sharedMemPerBlockOptin), u(d.reservedSharedMemPerBlock),
          u(f.maxThreadsPerBlock), u(f.numRegs), u(f.sharedSizeBytes), u(f.partitionedGCConfig),
          u(f.shmemLimitConfig), u(f.maxDynamicSharedSizeBytes), u(f.numBlockBarriers), u(f.virtualResourceCount),
          u(s.cacheConfig), u(s.carveoutConfig), u(block_threads), u(dynamic_smem_bytes)};
}
struct occupancy_memo {
  bool valid = false;
  occupancy_key key{};
  cudaOccResult result{};
};
thread_local occupancy_memo last_occupancy;

// The calculator proper, on inputs already checked.
struct calculator {
  cudaOccDeviceProp device_prop;
  cudaOccFuncAttributes function;
  cudaOccDeviceState state;
  const device_limits& device;
  const kernel_resources& kernel;

  calculator(const device_limits& d, const kernel_resources& k)
      : device_prop(occ_device(d)), function(occ_function(d, k)), device(d), kernel(k) {}

  cudaOccResult run(int block_threads, std::size_t dynamic_smem_bytes) const {
    const occupancy_key key = key_of(device_prop, function, state, block_threads, dynamic_smem_bytes);
    occupancy_memo& memo = last_occupancy;
    if (memo.valid && memo.key == key) return memo.result;
    cudaOccResult r{};
    const cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &device_prop, &function, &state,
                                                                        block_threads, dynamic_smem_bytes);
    if (status == CUDA_OCC_ERROR_UNKNOWN_DEVICE)
      throw error(errc::unknown_arch, "occupancy",
                  "compute capability " + std::to_string(device.cc_major) + "." +
                      std::to_string(device.cc_minor) + " is unknown to this toolkit's cuda_occupancy.h",
                  kernel.demangled, config_text(block_threads, dynamic_smem_bytes));
    if (status != CUDA_OCC_SUCCESS)
      throw error(errc::invalid_config, "occupancy",
                  "cuda_occupancy.h refused the device limits or kernel resources", kernel.demangled,
                  config_text(block_threads, dynamic_smem_bytes));
    memo.key = key;  // an answer, never a refusal (that is thrown again, with its text, each time)
    memo.result = r;
    memo.valid = true;
    return r;
  }

  int blocks(int block_threads, std::size_t dynamic_smem_bytes) const {
    return run(block_threads, dynamic_smem_bytes).activeBlocksPerMultiprocessor;
  }

  occupancy_result explain(int block_threads, std::size_t dynamic_smem_bytes) const {
    const cudaOccResult r = run(block_threads, dynamic_smem_bytes);
    occupancy_result out;
    out.block_threads = block_threads;
    out.dynamic_smem_bytes = dynamic_smem_bytes;
    out.active_blocks_per_sm = r.activeBlocksPerMultiprocessor;
    const int warps_per_block = (block_threads + device.warp_size - 1) / device.warp_size;
    out.active_warps_per_sm = out.active_blocks_per_sm * warps_per_block;
    out.active_threads_per_sm = out.active_blocks_per_sm * block_threads;
    const int max_warps = device.max_threads_per_sm / device.warp_size;
    out.occupancy = max_warps > 0 ? static_cast<double>(out.active_warps_per_sm) / max_warps : 0.0;
    // cuda_occupancy.h's bits differ from ours past shared memory; map them one by one.
    if (r.limitingFactors & OCC_LIMIT_WARPS) out.limiters |= limit_warps;
    if (r.limitingFactors & OCC_LIMIT_REGISTERS) out.limiters |= limit_registers;
    if (r.limitingFactors & OCC_LIMIT_SHARED_MEMORY) out.limiters |= limit_shared_memory;
    if (r.limitingFactors & OCC_LIMIT_BLOCKS) out.limiters |= limit_blocks;
    if (r.limitingFactors & OCC_LIMIT_BARRIERS) out.limiters |= limit_barriers;
    out.blocks_limit_warps = r.blockLimitWarps;
    out.blocks_limit_registers = r.blockLimitRegs;
    out.blocks_limit_shared_memory = r.blockLimitSharedMem;
    out.blocks_limit_blocks = r.blockLimitBlocks;
    out.allocated_regs_per_block = r.allocatedRegistersPerBlock;
    out.allocated_smem_per_block_bytes = r.allocatedSharedMemPerBlock;
    // No block fits for its registers alone: "limited by registers" does not say that it never will at
    // this size, nor what size would; the numbers do.
    if (r.blockLimitRegs == 0 && kernel.regs_per_thread > 0) {
      const register_block_limit limit = register_limit();
      if (block_threads > limit.max_threads)
        out.why_no_block = "a block of " + std::to_string(block_threads) +
                           " threads exceeds the register limit on threads per block: " + limit.text();
    }
    return out;
  }

  // The largest block whose registers cuda_occupancy.h admits (at most 32 evaluations, on checked inputs).
  register_block_limit register_limit() const {
    register_block_limit limit;
    limit.regs_per_thread = kernel.regs_per_thread;
    limit.regs_per_block = device.regs_per_block;
    int unit = 256;
    if (cudaOccRegAllocationGranularity(&unit, &device_prop) != CUDA_OCC_SUCCESS) unit = 256;
    limit.allocation_unit = unit;
    const int per_warp = kernel.regs_per_thread * device.warp_size;
    limit.regs_per_warp = (per_warp + unit - 1) / unit * unit;
    cudaOccFuncAttributes any_block = function;
    any_block.maxThreadsPerBlock = device.max_threads_per_block;
    const int warp = std::max(device.warp_size, 1);
    for (int warps = device.max_threads_per_block / warp; warps >= 1; --warps) {
      cudaOccResult r{};
      cudaOccDeviceState s = state;
      if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &device_prop, &any_block, &s, warps * warp, 0) ==
              CUDA_OCC_SUCCESS &&
          r.blockLimitRegs > 0) {
        limit.max_warps = warps;
        break;
      }
    }
    limit.warp_size = warp;
    limit.max_threads = limit.max_warps * warp;
    limit.device_max_threads = device.max_threads_per_block;
    return limit;
  }
};


}  // namespace

std::string limiter_names(unsigned limiters) {
  static constexpr std::pair<unsigned, const char*> names[] = {
      {limit_warps, "warps"},   {limit_registers, "registers"},   {limit_shared_memory, "shared_memory"},
      {limit_blocks, "blocks"}, {limit_block_size, "block_size"}, {limit_barriers, "barriers"},
  };
  std::string out;
  for (const auto& [bit, name] : names) {
    if (!(limiters & bit)) continue;
    if (!out.empty()) out += '|';
    out += name;
  }
  return out.empty() ? "none" : out;
}

std::string occupancy_result::summary() const {
  return std::to_string(active_blocks_per_sm) + " blocks x " + std::to_string(block_threads) +
         " threads = " + std::to_string(active_warps_per_sm) + " warps/SM (" +
         detail::percent_text(occupancy) + "), limited by " + limiter_names(limiters) +
         (why_no_block.empty() ? "" : ": " + why_no_block);
}

std::string register_block_limit::text() const {
  const int raw = regs_per_thread * warp_size;
  std::string text = std::to_string(regs_per_thread) + " registers per thread x " +
                     std::to_string(warp_size) + " threads = " + std::to_string(raw) + " registers per warp";
  text += raw == regs_per_warp
              ? " (a multiple of the " + std::to_string(allocation_unit) + "-register allocation unit)"
              : ", " + std::to_string(regs_per_warp) + " allocated (rounded up to the " +
                    std::to_string(allocation_unit) + "-register allocation unit)";
  const int fit = regs_per_warp > 0 ? regs_per_block / regs_per_warp : 0;
  text += "; " + std::to_string(regs_per_block) + " registers per block / " + std::to_string(regs_per_warp) +
          " = " + std::to_string(fit) + " warps";
  if (max_threads >= device_max_threads)
    return text + ": registers allow any block up to the device's " + std::to_string(device_max_threads) +
           " threads";
  if (max_warps != fit)
    text += ", " + std::to_string(max_warps) + " as the hardware counts a block's warps (in multiples of " +
            "the SM's sub-partitions)";
  return text + ": at most " + std::to_string(max_threads) + " threads per block";
}

register_block_limit registers_per_block_limit(const device_limits& device, int regs_per_thread) {
  const kernel_resources kernel = kernel_resources::manual(regs_per_thread);
  check_kernel(device, kernel);
  const calculator calc(device, kernel);
  calc.run(std::max(device.warp_size, 1), 0);  // an architecture cuda_occupancy.h does not know throws here
  return calc.register_limit();
}

occupancy_result occupancy(const device_limits& device, const kernel_resources& kernel, int block_threads,
                           std::size_t dynamic_smem_bytes) {
  check_config(device, kernel, block_threads, dynamic_smem_bytes);
  return calculator(device, kernel).explain(block_threads, dynamic_smem_bytes);
}

namespace detail {

candidate_block_order::candidate_block_order(int block_limit, int warp_size, int prefer_block) noexcept
    : limit_(std::max(block_limit, 0)), granularity_(warp_size > 0 ? warp_size : 32), prefer_(prefer_block) {
  if (limit_ == 0) return;
  top_multiple_ = (limit_ - 1) / granularity_ * granularity_;  // largest multiple below the limit
  count_ = top_multiple_ / granularity_ + 1;  // sizes 1..count (index count: the limit itself)
  if (prefer_ <= 0) {                         // from the largest down: the limit, then the multiples below it
    hi_ = count_;
    return;
  }
  lo_ = std::min(prefer_ / granularity_, count_);  // largest index whose size <= prefer_block
  while (lo_ >= 1 && size_at(lo_) > prefer_) --lo_;
  hi_ = lo_ + 1;
}

int candidate_block_order::next() noexcept {
  if (limit_ == 0) return 0;
  if (prefer_ <= 0) return hi_ >= 1 ? size_at(hi_--) : 0;
  // Nearest prefer_block first, merging the sizes below it (walking down) with those above (walking up);
  // equally near: the smaller first.
  if (lo_ < 1 && hi_ > count_) return 0;
  const bool take_lo = hi_ > count_ || (lo_ >= 1 && prefer_ - size_at(lo_) <= size_at(hi_) - prefer_);
  return size_at(take_lo ? lo_-- : hi_++);
}

std::vector<int> candidate_blocks(int block_limit, int warp_size, int prefer_block) {
  std::vector<int> blocks;
  for (candidate_block_order order(block_limit, warp_size, prefer_block); const int b = order.next();)
    blocks.push_back(b);
  return blocks;
}

potential_block search_potential_block(int block_limit, int warp_size, int max_threads_per_sm,
                                       const std::function<int(int)>& active_blocks, int prefer_block) {
  // Candidates come in preference order, so the strict '>' keeps the preferred block on a tie.
  potential_block best;
  int best_threads = 0;
  for (candidate_block_order order(block_limit, warp_size, prefer_block); const int block = order.next();) {
    const int blocks = active_blocks(block);
    if (block * blocks > best_threads) {
      best = {block, blocks};
      best_threads = block * blocks;
    }
    if (best_threads >= max_threads_per_sm) break;
  }
  return best;
}

std::string percent_text(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", fraction * 100.0);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s + "%";
}

}  // namespace detail

block_size_choice max_potential_block_size(const device_limits& device, const kernel_resources& kernel,
                                           const smem_per_block_fn& smem, int block_size_limit) {
  check_kernel(device, kernel);
  const calculator calc(device, kernel);
  const std::size_t optin = optin_bytes(device);

  int limit = max_block_threads(device, kernel);
  if (block_size_limit > 0) limit = std::min(limit, block_size_limit);
  auto dynamic_for = [&](int block) { return smem ? smem(block) : std::size_t{0}; };
  const detail::potential_block best =
      detail::search_potential_block(limit, device.warp_size, device.max_threads_per_sm, [&](int block) {
        const std::size_t dynamic = dynamic_for(block);
        // A block whose shared memory cannot be granted at all is simply not resident (0 blocks).
        const bool fits = dynamic <= optin && kernel.static_smem_bytes + dynamic <= optin;
        return fits ? calc.blocks(block, dynamic) : 0;
      });
  const int best_block = best.block_threads, best_blocks_per_sm = best.blocks_per_sm;
  const std::size_t best_smem = best_block > 0 ? dynamic_for(best_block) : 0;

  block_size_choice choice;
  choice.block_threads = best_block;  // 0 when no block size fits, as the driver reports it
  choice.min_grid_blocks = best_blocks_per_sm * device.sm_count;
  if (best_block > 0) choice.occupancy = calc.explain(best_block, best_smem);
  return choice;
}

one_more_block what_to_cut(const device_limits& device, const kernel_resources& kernel, int block_threads,
                           std::size_t dynamic_smem_bytes) {
  check_config(device, kernel, block_threads, dynamic_smem_bytes);
  one_more_block cut;
  cut.target_blocks_per_sm = calculator(device, kernel).blocks(block_threads, dynamic_smem_bytes) + 1;

  // Resident blocks never grow with more registers or more shared memory, so the answer is the largest
  // value below today's that reaches the target: a linear walk for registers (at most 255 steps), a
  // binary search for bytes.
  kernel_resources fewer_regs = kernel;
  for (int regs = kernel.regs_per_thread - 1; regs >= 0; --regs) {
    fewer_regs.regs_per_thread = regs;
    if (calculator(device, fewer_regs).blocks(block_threads, dynamic_smem_bytes) >=
        cut.target_blocks_per_sm) {
      cut.max_regs_per_thread = regs;
      break;
    }
  }

  const calculator calc(device, kernel);
  if (dynamic_smem_bytes > 0 && calc.blocks(block_threads, 0) >= cut.target_blocks_per_sm) {
    std::size_t reaches = 0, misses = dynamic_smem_bytes;  // invariant: reaches works, misses does not
    while (misses - reaches > 1) {
      const std::size_t mid = reaches + (misses - reaches) / 2;
      (calc.blocks(block_threads, mid) >= cut.target_blocks_per_sm ? reaches : misses) = mid;
    }
    cut.max_dynamic_smem_bytes = static_cast<long long>(reaches);
  }
  return cut;
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// launchfit/occupancy.hpp: the offline calculator agrees with NVIDIA's model and explains what binds.

#include "launchfit/occupancy.hpp"

#include <cuda_occupancy.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "launchfit/error.hpp"

namespace {

using launchfit::device_limits;
using launchfit::kernel_resources;

constexpr std::size_t KiB = 1024;

const device_limits& sm90() {
  static const device_limits d = device_limits::for_arch("H100");
  return d;
}

launchfit::occupancy_result h100(int threads, int regs, std::size_t dynamic_smem,
                                 std::size_t static_smem = 0) {
  return launchfit::occupancy(sm90(), kernel_resources::manual(regs, static_smem), threads, dynamic_smem);
}

// cuda_occupancy.h's inputs for a device and a kernel, set up the way the driver agrees with (opt-in limit).
struct occ_inputs {
  cudaOccDeviceProp prop;
  cudaOccFuncAttributes attr;
  cudaOccDeviceState state;

  occ_inputs(const device_limits& d, const kernel_resources& k) {
    prop.computeMajor = d.cc_major;
    prop.computeMinor = d.cc_minor;
    prop.maxThreadsPerBlock = d.max_threads_per_block;
    prop.maxThreadsPerMultiprocessor = d.max_threads_per_sm;
    prop.regsPerBlock = d.regs_per_block;
    prop.regsPerMultiprocessor = d.regs_per_sm;
    prop.warpSize = d.warp_size;
    prop.sharedMemPerBlock = d.smem_per_block_bytes;
    prop.sharedMemPerMultiprocessor = d.smem_per_sm_bytes;
    prop.numSms = d.sm_count;
    prop.sharedMemPerBlockOptin = d.smem_per_block_optin_bytes;
    prop.reservedSharedMemPerBlock = d.smem_reserved_per_block_bytes;
    attr.maxThreadsPerBlock = k.max_threads_per_block;
    attr.numRegs = k.regs_per_thread;
    attr.sharedSizeBytes = k.static_smem_bytes;
    attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    attr.maxDynamicSharedSizeBytes = d.smem_per_block_optin_bytes - k.static_smem_bytes;
    attr.numBlockBarriers = 1;
  }
};

// The reference: cuda_occupancy.h called directly.
int reference_blocks(const device_limits& d, const kernel_resources& k, int threads,
                     std::size_t dynamic_smem) {
  occ_inputs in(d, k);
  cudaOccResult result{};
  EXPECT_EQ(
      cudaOccMaxActiveBlocksPerMultiprocessor(&result, &in.prop, &in.attr, &in.state, threads, dynamic_smem),
      CUDA_OCC_SUCCESS);
  return result.activeBlocksPerMultiprocessor;
}

TEST(Occupancy, H100RegisterLimitedExample) {
  const auto r = h100(256, 40, 16 * KiB);
  EXPECT_EQ(r.active_blocks_per_sm, 6);
  EXPECT_EQ(r.active_warps_per_sm, 48);
  EXPECT_EQ(r.active_threads_per_sm, 1536);
  EXPECT_DOUBLE_EQ(r.occupancy, 0.75);
  EXPECT_EQ(r.limiters, launchfit::limit_registers);
  EXPECT_EQ(r.blocks_limit_warps, 8);
  EXPECT_EQ(r.blocks_limit_registers, 6);
  EXPECT_EQ(r.blocks_limit_shared_memory, 13);  // 228 KB / (16 KB + 1 KB reserve)
  EXPECT_EQ(r.blocks_limit_blocks, 32);
  EXPECT_EQ(r.allocated_regs_per_block, 8 * 1280);  // 40 x 32 rounds to 1280 per warp
  EXPECT_EQ(r.allocated_smem_per_block_bytes, 17 * KiB);
  EXPECT_EQ(r.summary(), "6 blocks x 256 threads = 48 warps/SM (75%), limited by registers");
}

TEST(Occupancy, H100SharedMemoryLimitedExample) {
  const auto r = h100(128, 168, 96 * KiB);
  EXPECT_EQ(r.active_blocks_per_sm, 2);
  EXPECT_EQ(r.active_warps_per_sm, 8);
  EXPECT_DOUBLE_EQ(r.occupancy, 0.125);
  EXPECT_EQ(r.limiters, launchfit::limit_shared_memory);
  EXPECT_EQ(r.blocks_limit_registers, 3);
  EXPECT_EQ(r.blocks_limit_shared_memory, 2);
  EXPECT_EQ(r.summary(), "2 blocks x 128 threads = 8 warps/SM (12.5%), limited by shared_memory");
}

TEST(Occupancy, H100RegisterTableAt256Threads) {
  EXPECT_DOUBLE_EQ(h100(256, 32, 0).occupancy, 1.0);
  EXPECT_DOUBLE_EQ(h100(256, 64, 0).occupancy, 0.5);
  EXPECT_DOUBLE_EQ(h100(256, 128, 0).occupancy, 0.25);
  EXPECT_DOUBLE_EQ(h100(256, 255, 0).occupancy, 0.125);
  EXPECT_EQ(h100(256, 255, 0).allocated_regs_per_block, 8 * 8192);  // 255 x 32 rounds up to 8192
}

TEST(Occupancy, WarpSizedBlocksHitTheBlockCountLimit) {
  const auto r = h100(32, 16, 0);
  EXPECT_EQ(r.active_blocks_per_sm, 32);
  EXPECT_DOUBLE_EQ(r.occupancy, 0.5);
  EXPECT_EQ(r.limiters, launchfit::limit_blocks);
}

TEST(Occupancy, RegistersAreSplitOverSubPartitions) {
  // 1280 registers per warp: 12 warps per 16K-register sub-partition, 48 per SM, so 16 blocks of 3
  // warps, not the 17 that 65536 / (96 x 40) would suggest.
  const auto r = h100(96, 40, 0);
  EXPECT_EQ(r.active_blocks_per_sm, 16);
  EXPECT_EQ(r.limiters, launchfit::limit_registers);
}

TEST(Occupancy, TiesSetSeveralLimiterBits) {
  // 8 blocks of 256 threads fill the warps, the registers (32 per thread) and exactly the shared memory.
  const std::size_t smem = 233472 / 8 - KiB;
  const auto r = h100(256, 32, smem);
  EXPECT_EQ(r.active_blocks_per_sm, 8);
  EXPECT_EQ(r.limiters, launchfit::limit_warps | launchfit::limit_registers | launchfit::limit_shared_memory);
  EXPECT_EQ(launchfit::limiter_names(r.limiters), "warps|registers|shared_memory");
  EXPECT_EQ(launchfit::limiter_names(0), "none");
}

// The calculator remembers its last answer on each thread, keyed by every input cuda_occupancy.h reads: a call
// that differs from the one before in any single input is answered for its own inputs (each variation below
// changes the reference answer, so a key that left its input out would repeat the answer before).
TEST(Occupancy, ACallDifferingInOneInputFromTheLastIsAnsweredAnew) {
  struct config {
    device_limits d;
    kernel_resources k;
    int threads;
    std::size_t smem;
  };
  const config base{sm90(), kernel_resources::manual(64, 4 * KiB), 256, 16 * KiB};
  std::vector<std::pair<const char*, config>> variations;
  auto vary = [&](const char* what, auto change) {
    config c = base;
    change(c);
    variations.emplace_back(what, c);
  };
  vary("block threads", [](config& c) { c.threads = 512; });
  vary("dynamic smem", [](config& c) { c.smem = 100 * KiB; });
  vary("registers", [](config& c) { c.k.regs_per_thread = 128; });
  vary("static smem", [](config& c) { c.k.static_smem_bytes = 60 * KiB; });
  vary("registers per SM", [](config& c) { c.d.regs_per_sm = 32 * 1024; });
  vary("smem per SM", [](config& c) { c.d.smem_per_sm_bytes = 60 * KiB; });
  vary("threads per SM", [](config& c) { c.d.max_threads_per_sm = 512; });
  vary("reserved smem", [](config& c) { c.d.smem_reserved_per_block_bytes = 50 * KiB; });
  vary("architecture", [](config& c) { c.d = device_limits::for_arch("sm_75"); });
  const int base_blocks = reference_blocks(base.d, base.k, base.threads, base.smem);
  for (const auto& [what, c] : variations) {
    const int expected = reference_blocks(c.d, c.k, c.threads, c.smem);
    ASSERT_NE(expected, base_blocks) << what << ": the variation does not change the answer";
    for (int round = 0; round < 2; ++round) {  // base, variation, base, variation
      EXPECT_EQ(launchfit::occupancy(base.d, base.k, base.threads, base.smem).active_blocks_per_sm, base_blocks)
          << what;
      EXPECT_EQ(launchfit::occupancy(c.d, c.k, c.threads, c.smem).active_blocks_per_sm, expected) << what;
    }
  }
}

TEST(Occupancy, BlocksThatCannotFitReportZeroNotAnError) {
  // 255 registers x 1024 threads needs more than the 64K registers a block may use.
  const auto r = h100(1024, 255, 0);
  EXPECT_EQ(r.active_blocks_per_sm, 0);
  EXPECT_EQ(r.occupancy, 0.0);
  EXPECT_TRUE(r.limiters & launchfit::limit_registers);
}

TEST(Occupancy, OtherArchitectures) {
  // sm_86: 48 warps and 16 blocks per SM; sm_75: 32 warps and 16 blocks per SM.
  const auto ampere =
      launchfit::occupancy(device_limits::for_arch("sm_86"), kernel_resources::manual(32), 64, 0);
  EXPECT_EQ(ampere.active_blocks_per_sm, 16);
  EXPECT_NEAR(ampere.occupancy, 32.0 / 48.0, 1e-12);
  const auto turing =
      launchfit::occupancy(device_limits::for_arch("sm_75"), kernel_resources::manual(32), 1024, 0);
  EXPECT_EQ(turing.active_blocks_per_sm, 1);
  EXPECT_DOUBLE_EQ(turing.occupancy, 1.0);
}

void expect_invalid(int threads, int regs, std::size_t dynamic_smem, std::size_t static_smem, int kernel_max,
                    const std::string& says) {
  try {
    launchfit::occupancy(sm90(), kernel_resources::manual(regs, static_smem, kernel_max), threads,
                         dynamic_smem);
    ADD_FAILURE() << "no error for " << threads << " threads, " << regs << " regs, " << dynamic_smem << " B";
  } catch (const launchfit::error& e) {
    EXPECT_EQ(e.call(), "occupancy");
    EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_CONFIG");
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Occupancy, ImpossibleInputsThrow) {
  expect_invalid(0, 32, 0, 0, 1024, "at least 1 thread");
  expect_invalid(1025, 32, 0, 0, 1024, "device maximum of 1024");
  expect_invalid(512, 32, 0, 0, 256, "kernel's maximum of 256");
  expect_invalid(256, 256, 0, 0, 1024, "0..255");
  expect_invalid(256, 32, 227 * KiB + 1, 0, 1024, "opt-in maximum");
  expect_invalid(256, 32, 30 * KiB, 200 * KiB, 1024, "opt-in maximum");
  EXPECT_NO_THROW(h100(256, 32, 227 * KiB));
  EXPECT_NO_THROW(h100(256, 32, 27 * KiB, 200 * KiB));
}

TEST(Occupancy, UnknownComputeCapabilityThrows) {
  device_limits future = sm90();
  future.cc_major = 42;
  EXPECT_THROW(launchfit::occupancy(future, kernel_resources::manual(32), 256, 0), launchfit::error);
}

// cuOccupancyMaxPotentialBlockSize's answer, from cuda_occupancy.h's own search.
template <typename Fn>
std::pair<int, int> reference_potential(const device_limits& d, const kernel_resources& k, Fn smem) {
  occ_inputs in(d, k);
  int min_grid = 0, block = 0;
  EXPECT_EQ(cudaOccMaxPotentialOccupancyBlockSizeVariableSMem(&min_grid, &block, &in.prop, &in.attr, &in.state,
                                                              smem),
            CUDA_OCC_SUCCESS);
  return {block, min_grid};
}

TEST(MaxPotentialBlockSize, MatchesTheDriverSearch) {
  const auto none = [](int) { return std::size_t{0}; };
  for (int regs : {16, 32, 40, 64, 72, 96, 128, 168, 200, 255}) {
    for (int kernel_max : {1024, 768, 640, 200, 96}) {
      const auto kernel = kernel_resources::manual(regs, 4 * KiB, kernel_max);
      const auto choice = launchfit::max_potential_block_size(sm90(), kernel);
      const auto [block, min_grid] = reference_potential(sm90(), kernel, none);
      EXPECT_EQ(choice.block_threads, block) << regs << " regs, kernel max " << kernel_max;
      EXPECT_EQ(choice.min_grid_blocks, min_grid) << regs << " regs, kernel max " << kernel_max;
      EXPECT_EQ(choice.occupancy.block_threads, block);
    }
  }
  // 40 registers: 48 warps fit; 768-thread blocks reach them first (larger block wins the tie with 512).
  const auto choice = launchfit::max_potential_block_size(sm90(), kernel_resources::manual(40));
  EXPECT_EQ(choice.block_threads, 768);
  EXPECT_EQ(choice.min_grid_blocks, 2 * 132);
  EXPECT_DOUBLE_EQ(choice.occupancy.occupancy, 0.75);
}

TEST(MaxPotentialBlockSize, HonoursACapturingSmemFunction) {
  const std::size_t bytes_per_thread = 200;  // captured: the driver's C callback could not take this
  const auto smem = [bytes_per_thread](int block) {
    return bytes_per_thread * static_cast<std::size_t>(block);
  };
  const auto kernel = kernel_resources::manual(32);
  const auto choice = launchfit::max_potential_block_size(sm90(), kernel, smem);
  const auto [block, min_grid] = reference_potential(sm90(), kernel, smem);
  EXPECT_EQ(choice.block_threads, block);
  EXPECT_EQ(choice.min_grid_blocks, min_grid);
  EXPECT_EQ(choice.occupancy.dynamic_smem_bytes, smem(block));
  EXPECT_NE(choice.block_threads, launchfit::max_potential_block_size(sm90(), kernel).block_threads);

  // Block sizes whose shared memory is over the limit count as not resident, not as errors.
  const auto greedy = [](int block) { return static_cast<std::size_t>(block) * 1024; };
  const auto small = launchfit::max_potential_block_size(sm90(), kernel, greedy);
  EXPECT_EQ(small.block_threads, 224);  // 224 KB + 1 KB reserve, one block: the most threads that fit
  const auto nothing = [](int) { return std::size_t{300} * KiB; };
  EXPECT_EQ(launchfit::max_potential_block_size(sm90(), kernel, nothing).block_threads, 0);
}

TEST(MaxPotentialBlockSize, BlockSizeLimit) {
  const auto kernel = kernel_resources::manual(40);
  const auto choice = launchfit::max_potential_block_size(sm90(), kernel, {}, 200);
  const auto [block, min_grid] =
      reference_potential(sm90(), kernel_resources::manual(40, 0, 200), [](int) { return std::size_t{0}; });
  EXPECT_LE(choice.block_threads, 200);
  EXPECT_EQ(choice.block_threads, block);
  EXPECT_EQ(choice.min_grid_blocks, min_grid);
}

int blocks_with(const kernel_resources& k, int threads, std::size_t smem) {
  return launchfit::occupancy(sm90(), k, threads, smem).active_blocks_per_sm;
}

// The answer reaches one more block, and one register or one byte more does not.
void expect_tight_cut(const kernel_resources& k, int threads, std::size_t smem) {
  const int now = blocks_with(k, threads, smem);
  const auto cut = launchfit::what_to_cut(sm90(), k, threads, smem);
  EXPECT_EQ(cut.target_blocks_per_sm, now + 1);
  if (cut.max_regs_per_thread >= 0) {
    ASSERT_LT(cut.max_regs_per_thread, k.regs_per_thread);
    kernel_resources fewer = k;
    fewer.regs_per_thread = cut.max_regs_per_thread;
    EXPECT_GE(blocks_with(fewer, threads, smem), now + 1);
    fewer.regs_per_thread = cut.max_regs_per_thread + 1;
    EXPECT_LT(blocks_with(fewer, threads, smem), now + 1);
  } else {
    kernel_resources none = k;
    none.regs_per_thread = 0;
    EXPECT_LT(blocks_with(none, threads, smem), now + 1);
  }
  if (cut.max_dynamic_smem_bytes >= 0) {
    const auto bytes = static_cast<std::size_t>(cut.max_dynamic_smem_bytes);
    ASSERT_LT(bytes, smem);
    EXPECT_GE(blocks_with(k, threads, bytes), now + 1);
    EXPECT_LT(blocks_with(k, threads, bytes + 1), now + 1);
  } else {
    EXPECT_LT(blocks_with(k, threads, 0), now + 1);
  }
}

TEST(WhatToCut, WorkedExamples) {
  // Register-bound: 32 registers give 7 blocks of 256 threads; shared memory alone cannot help.
  const auto regs_bound = launchfit::what_to_cut(sm90(), kernel_resources::manual(40), 256, 16 * KiB);
  EXPECT_EQ(regs_bound.target_blocks_per_sm, 7);
  EXPECT_EQ(regs_bound.max_regs_per_thread, 32);
  EXPECT_EQ(regs_bound.max_dynamic_smem_bytes, -1);
  // Shared-memory-bound: three blocks need 3 x (75 KB + 1 KB reserve) <= 228 KB.
  const auto smem_bound = launchfit::what_to_cut(sm90(), kernel_resources::manual(168), 128, 96 * KiB);
  EXPECT_EQ(smem_bound.target_blocks_per_sm, 3);
  EXPECT_EQ(smem_bound.max_regs_per_thread, -1);
  EXPECT_EQ(smem_bound.max_dynamic_smem_bytes, 75 * 1024);
  // Warp-bound at full occupancy: nothing to cut.
  const auto full = launchfit::what_to_cut(sm90(), kernel_resources::manual(32), 256, 0);
  EXPECT_EQ(full.max_regs_per_thread, -1);
  EXPECT_EQ(full.max_dynamic_smem_bytes, -1);
  expect_tight_cut(kernel_resources::manual(40), 256, 16 * KiB);
  expect_tight_cut(kernel_resources::manual(168), 128, 96 * KiB);
}

TEST(WhatToCut, AnswersAreTightOnRandomConfigs) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const int threads = std::uniform_int_distribution<int>(1, 1024)(rng);
    const int regs = std::uniform_int_distribution<int>(1, 255)(rng);
    const std::size_t static_smem = std::uniform_int_distribution<std::size_t>(0, 16 * KiB)(rng);
    const std::size_t smem = std::uniform_int_distribution<std::size_t>(0, 227 * KiB - static_smem)(rng);
    SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(regs) + " regs, " +
                 std::to_string(static_smem) + " + " + std::to_string(smem) + " B");
    expect_tight_cut(kernel_resources::manual(regs, static_smem), threads, smem);
  }
}

// Every built-in architecture, random configurations: launchfit::occupancy is cuda_occupancy.h.
TEST(Occupancy, RandomSweepAgreesWithCudaOccupancyOnEveryArchitecture) {
  std::mt19937_64 rng(20240611);
  const auto table = device_limits::builtin_table();
  ASSERT_EQ(table.size(), 17u);
  long long points = 0, nonzero = 0;
  for (const device_limits& d : table) {
    SCOPED_TRACE(d.arch());
    for (int i = 0; i < 8000; ++i) {
      const int threads = std::uniform_int_distribution<int>(1, d.max_threads_per_block)(rng);
      const int regs = std::uniform_int_distribution<int>(0, d.max_regs_per_thread)(rng);
      const int kernel_max = (i % 4 == 0) ? std::uniform_int_distribution<int>(threads, 1024)(rng) : 1024;
      const std::size_t optin = d.smem_per_block_optin_bytes;
      const std::size_t static_smem =
          (i % 2 == 0) ? 0 : std::uniform_int_distribution<std::size_t>(0, optin / 4)(rng);
      const std::size_t dynamic_smem =
          (i % 3 == 0) ? 0 : std::uniform_int_distribution<std::size_t>(0, optin - static_smem)(rng);
      const auto kernel = kernel_resources::manual(regs, static_smem, kernel_max);
      const auto r = launchfit::occupancy(d, kernel, threads, dynamic_smem);
      const int expected = reference_blocks(d, kernel, threads, dynamic_smem);
      ASSERT_EQ(r.active_blocks_per_sm, expected)
          << threads << " threads, " << regs << " regs, " << static_smem << " + " << dynamic_smem << " B";
      // The explanation is consistent with the answer.
      ASSERT_EQ(r.active_blocks_per_sm, std::min({r.blocks_limit_warps, r.blocks_limit_registers,
                                                  r.blocks_limit_shared_memory, r.blocks_limit_blocks}));
      ASSERT_NE(r.limiters, 0u);
      ASSERT_LE(r.occupancy, 1.0);
      ++points;
      nonzero += expected > 0;
    }
  }
  EXPECT_GE(points, 100000);
  EXPECT_GT(nonzero, points / 2);  // the sweep exercises real configurations, not only refusals
}

// The search's candidate order: every warp multiple below the limit plus the limit, nearest prefer_block
// first (the smaller on a tie), or from the largest down; checked against sorting the set.
TEST(CandidateBlocks, OrderMatchesASortedReference) {
  for (int limit : {1, 20, 32, 33, 96, 200, 256, 500, 896, 1000, 1024}) {
    for (int warp : {32, 64}) {
      std::vector<int> set;
      for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) set.push_back(std::min(limit, aligned));
      EXPECT_EQ(launchfit::detail::candidate_blocks(limit, warp, 0), set) << limit;
      for (int prefer : {1, 16, 32, 48, 100, 199, 256, 300, 1024, 4096}) {
        std::vector<int> want = set;
        std::stable_sort(want.begin(), want.end(), [&](int a, int b) {
          const int da = std::abs(a - prefer), db = std::abs(b - prefer);
          return da != db ? da < db : a < b;
        });
        EXPECT_EQ(launchfit::detail::candidate_blocks(limit, warp, prefer), want)
            << "limit " << limit << " warp " << warp << " prefer " << prefer;
      }
    }
  }
}

}  // namespace

// 168 registers x 1024 threads: no block fits, and the result says which limit and with what numbers,
// so the library and launchfit-calc say the same thing.
TEST(Occupancy, TheRegisterLimitOnThreadsPerBlockIsNamedWithItsNumbers) {
  const auto r = h100(1024, 168, 0);
  EXPECT_EQ(r.active_blocks_per_sm, 0);
  EXPECT_EQ(r.limiters, launchfit::limit_registers);
  EXPECT_EQ(
      r.why_no_block,
      "a block of 1024 threads exceeds the register limit on threads per block: 168 registers per thread x "
      "32 threads = 5376 registers per warp (a multiple of the 256-register allocation unit); 65536 "
      "registers per block / 5376 = 12 warps: at most 384 threads per block");
  EXPECT_NE(r.summary().find("limited by registers: a block of 1024 threads exceeds the register limit"),
            std::string::npos)
      << r.summary();
  // The block the limit names is the largest that runs.
  EXPECT_GT(h100(384, 168, 0).active_blocks_per_sm, 0);
  EXPECT_TRUE(h100(384, 168, 0).why_no_block.empty());
  EXPECT_EQ(h100(416, 168, 0).active_blocks_per_sm, 0);

  // Rounding to the allocation unit and to whole sub-partitions is said when it changes the figure.
  const auto limit = launchfit::registers_per_block_limit(sm90(), 170);  // 5440 -> 5632 per warp
  EXPECT_EQ(limit.regs_per_warp, 5632);
  EXPECT_EQ(limit.max_warps, 8);  // 11 warps fit 64K, but a block's warps count in fours
  EXPECT_EQ(limit.max_threads, 256);
  EXPECT_EQ(
      limit.text(),
      "170 registers per thread x 32 threads = 5440 registers per warp, 5632 allocated (rounded up to the "
      "256-register allocation unit); 65536 registers per block / 5632 = 11 warps, 8 as the hardware "
      "counts a block's warps (in multiples of the SM's sub-partitions): at most 256 threads per block");
  EXPECT_EQ(h100(256, 170, 0).active_blocks_per_sm, 1);
  EXPECT_EQ(h100(288, 170, 0).active_blocks_per_sm, 0);
  EXPECT_EQ(launchfit::registers_per_block_limit(sm90(), 32).text(),
            "32 registers per thread x 32 threads = 1024 registers per warp (a multiple of the 256-register "
            "allocation unit); 65536 registers per block / 1024 = 64 warps: registers allow any block up to "
            "the device's 1024 threads");
  EXPECT_THROW(launchfit::registers_per_block_limit(sm90(), 256), launchfit::error);
}

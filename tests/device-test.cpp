// SPDX-License-Identifier: MIT
// launchfit/device.hpp: the built-in per-architecture table (the driver query is tested on the GPU).

#include "launchfit/device.hpp"

#include <cuda_occupancy.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "launchfit/error.hpp"

namespace {

using launchfit::device_limits;

TEST(DeviceTable, EverySpellingOfAnArchitecture) {
  for (const char* spelling : {"sm_90", "90", "9.0", "sm90", "SM_90", "sm_90a", "compute_90"}) {
    const device_limits d = device_limits::for_arch(spelling);
    EXPECT_EQ(d.arch(), "sm_90") << spelling;
    EXPECT_EQ(d.cc(), 90) << spelling;
    EXPECT_EQ(d.name, "sm_90 (table)") << spelling;
  }
  EXPECT_EQ(device_limits::for_arch("10.3").arch(), "sm_103");
  EXPECT_EQ(device_limits::for_arch("sm_100").arch(), "sm_100");
  EXPECT_EQ(device_limits::for_arch("120").cc(), 120);
  EXPECT_EQ(device_limits::for_arch("12.0").arch(), "sm_120");
  EXPECT_EQ(device_limits::for_arch("5.0").arch(), "sm_50");
}

TEST(DeviceTable, PartNamesAreCaseInsensitive) {
  const struct {
    const char* name;
    int cc, sm_count;
  } parts[] = {{"H200", 90, 132},    {"h200", 90, 132},      {"NVIDIA H200", 90, 132},
               {"H100", 90, 132},    {"A100", 80, 108},      {"RTX 4090", 89, 128},
               {"rtx4090", 89, 128}, {"L4", 89, 58},         {"V100", 70, 80},
               {"B200", 100, 148},   {"RTX 5090", 120, 170}, {"geforce rtx 5090", 120, 170}};
  for (const auto& p : parts) {
    const device_limits d = device_limits::for_arch(p.name);
    EXPECT_EQ(d.cc(), p.cc) << p.name;
    EXPECT_EQ(d.sm_count, p.sm_count) << p.name;
    EXPECT_NE(d.name.find("(table)"), std::string::npos) << p.name;
  }
  EXPECT_EQ(device_limits::for_arch("H200").l2_bytes, 60u * 1024 * 1024);
  EXPECT_EQ(device_limits::for_arch("H100").l2_bytes, 50u * 1024 * 1024);
  EXPECT_EQ(device_limits::for_arch("H200").memory_bus_width_bits, 6016);  // as the driver reports it
}

TEST(DeviceTable, UnknownNameListsTheKnownOnes) {
  for (const char* unknown : {"sm_99", "H300", "", "9", "sm_9.0.1"}) {
    try {
      device_limits::for_arch(unknown);
      ADD_FAILURE() << "no error for '" << unknown << "'";
    } catch (const launchfit::error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.call(), "device_limits::for_arch");
      EXPECT_NE(what.find("'" + std::string(unknown) + "'"), std::string::npos) << what;
      for (const char* known : {"sm_50", "sm_90", "sm_120", "H200", "RTX 4090", "L4"})
        EXPECT_NE(what.find(known), std::string::npos) << known << " missing from: " << what;
    }
  }
}

TEST(DeviceTable, Sm90MatchesTheH200) {
  const device_limits d = device_limits::for_arch("sm_90");
  EXPECT_EQ(d.regs_per_sm, 65536);
  EXPECT_EQ(d.regs_per_block, 65536);
  EXPECT_EQ(d.max_regs_per_thread, 255);
  EXPECT_EQ(d.reg_alloc_unit, 256);
  EXPECT_EQ(d.warp_alloc_granularity, 4);
  EXPECT_EQ(d.smem_per_sm_bytes, 228u * 1024);
  EXPECT_EQ(d.smem_per_block_optin_bytes, 227u * 1024);
  EXPECT_EQ(d.smem_per_block_bytes, 48u * 1024);
  EXPECT_EQ(d.smem_reserved_per_block_bytes, 1024u);
  EXPECT_EQ(d.smem_alloc_unit_bytes, 128u);
  EXPECT_EQ(d.max_warps_per_sm, 64);
  EXPECT_EQ(d.max_threads_per_sm, 2048);
  EXPECT_EQ(d.max_blocks_per_sm, 32);
  EXPECT_TRUE(d.cooperative_launch);
  EXPECT_TRUE(d.cluster_launch);
}

TEST(DeviceTable, H200PeakBandwidth) {
  const double peak = device_limits::for_arch("H200").peak_bandwidth_bytes_per_s();
  EXPECT_NEAR(peak, 4.8e12, 0.05 * 4.8e12);
  EXPECT_NEAR(device_limits::for_arch("H100").peak_bandwidth_bytes_per_s(), 3.35e12, 0.05 * 3.35e12);
  device_limits unknown;
  EXPECT_EQ(unknown.peak_bandwidth_bytes_per_s(), 0.0);
}

TEST(DeviceTable, EveryEntryIsSane) {
  const auto table = device_limits::builtin_table();
  std::set<std::string> archs;
  for (const device_limits& d : table) {
    SCOPED_TRACE(d.arch());
    archs.insert(d.arch());
    EXPECT_EQ(device_limits::for_arch(d.arch()).cc(), d.cc());
    EXPECT_EQ(d.ordinal, -1);
    EXPECT_TRUE(d.uuid.empty());
    EXPECT_GT(d.sm_count, 0);
    EXPECT_EQ(d.regs_per_sm, 65536);
    EXPECT_GE(d.regs_per_block, 32768);
    EXPECT_LE(d.regs_per_block, d.regs_per_sm);
    EXPECT_EQ(d.max_regs_per_thread, 255);
    EXPECT_EQ(d.reg_alloc_unit, 256);
    EXPECT_GT(d.warp_alloc_granularity, 0);
    EXPECT_GE(d.smem_per_sm_bytes, d.smem_per_block_optin_bytes);
    EXPECT_GE(d.smem_per_block_optin_bytes, d.smem_per_block_bytes);
    EXPECT_EQ(d.smem_per_block_bytes, 48u * 1024);
    EXPECT_EQ(d.smem_reserved_per_block_bytes, d.cc_major >= 8 ? 1024u : 0u);
    EXPECT_GT(d.smem_alloc_unit_bytes, 0u);
    EXPECT_EQ(d.max_warps_per_sm * d.warp_size, d.max_threads_per_sm);
    EXPECT_GT(d.max_blocks_per_sm, 0);
    EXPECT_EQ(d.max_threads_per_block, 1024);
    EXPECT_EQ(d.warp_size, 32);
    for (int i = 0; i < 3; ++i) {
      EXPECT_GT(d.max_block_dim[i], 0);
      EXPECT_GT(d.max_grid_dim[i], 0);
    }
    EXPECT_GT(d.l2_bytes, 0u);
    EXPECT_GT(d.memory_bus_width_bits, 0);
    EXPECT_GT(d.memory_clock_khz, 0);
    EXPECT_GT(d.peak_bandwidth_bytes_per_s(), 1e10);
    EXPECT_EQ(d.cooperative_launch, d.cc_major >= 6);
    EXPECT_EQ(d.cluster_launch, d.cc_major >= 9);

    // The table and cuda_occupancy.h's own per-architecture switches must tell the same story, or the
    // explanation would contradict the numbers.
    cudaOccDeviceProp prop;
    prop.computeMajor = d.cc_major;
    prop.computeMinor = d.cc_minor;
    int occ_blocks = 0, occ_granularity = 0, occ_sub_partitions = 0, occ_reg_unit = 0;
    ASSERT_EQ(cudaOccMaxBlocksPerMultiprocessor(&occ_blocks, &prop), CUDA_OCC_SUCCESS);
    ASSERT_EQ(cudaOccSMemAllocationGranularity(&occ_granularity, &prop), CUDA_OCC_SUCCESS);
    ASSERT_EQ(cudaOccSubPartitionsPerMultiprocessor(&occ_sub_partitions, &prop), CUDA_OCC_SUCCESS);
    ASSERT_EQ(cudaOccRegAllocationGranularity(&occ_reg_unit, &prop), CUDA_OCC_SUCCESS);
    EXPECT_EQ(d.max_blocks_per_sm, occ_blocks);
    EXPECT_EQ(d.smem_alloc_unit_bytes, static_cast<std::size_t>(occ_granularity));
    EXPECT_EQ(d.warp_alloc_granularity, occ_sub_partitions);
    EXPECT_EQ(d.reg_alloc_unit, occ_reg_unit);
    if (d.cc_major >= 7) {  // the largest carveout is one cuda_occupancy.h knows
      std::size_t carveout = d.smem_per_sm_bytes;
      ASSERT_EQ(cudaOccAlignUpShmemSizeVoltaPlus(&carveout, &prop), CUDA_OCC_SUCCESS);
      EXPECT_EQ(carveout, d.smem_per_sm_bytes);
    }
  }
  const std::set<std::string> expected = {"sm_50", "sm_52", "sm_53",  "sm_60",  "sm_61", "sm_62",
                                          "sm_70", "sm_72", "sm_75",  "sm_80",  "sm_86", "sm_87",
                                          "sm_89", "sm_90", "sm_100", "sm_103", "sm_120"};
  EXPECT_EQ(archs, expected);
  EXPECT_EQ(table.size(), expected.size());
}

}  // namespace

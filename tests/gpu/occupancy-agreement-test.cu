// SPDX-License-Identifier: MIT
// The offline calculator (sm_90 table + cuda_occupancy.h) against the runtime's occupancy API on a real
// cc 9.0 device: every block size and a ladder of dynamic shared memory sizes, for kernels whose register
// counts come from the compiler, not from us.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/device.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/occupancy.hpp"
#include "many_live_values.cuh"

#include <atomic>

namespace launchfit::detail {
// Internal (lib/planner.hpp): whether the calculator still answers candidate blocks, and its test skew.
bool calculator_trusted_now() noexcept;
extern std::atomic<int> calculator_skew_for_tests;
}  // namespace launchfit::detail

namespace {

__global__ void light(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x; }
__global__ void heavy(const float* in, float* out) { many_live_values<224>(in, out); }
__global__ void medium(const float* in, float* out) { many_live_values<72>(in, out); }
__global__ void __launch_bounds__(256, 4) bounded_256x4(const float* in, float* out) {
  many_live_values<96>(in, out);
}
__global__ void __launch_bounds__(1024, 1) bounded_1024x1(const float* in, float* out) {
  many_live_values<96>(in, out);
}
__global__ void __launch_bounds__(768, 2) bounded_768x2(const float* in, float* out) {
  many_live_values<64>(in, out);
}
__global__ void __launch_bounds__(96) bounded_96(const float* in, float* out) {
  many_live_values<128>(in, out);
}
__global__ void __maxnreg__(40) capped_40(const float* in, float* out) { many_live_values<64>(in, out); }
__global__ void __maxnreg__(168) capped_168(const float* in, float* out) { many_live_values<160>(in, out); }
__global__ void static_tile(const float* in, float* out) {
  __shared__ float tile[10 * 1024];  // 40 KB static, plus dynamic on top
  extern __shared__ float extra[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = in[i];
  extra[threadIdx.x] = in[i + 1];
  __syncthreads();
  out[i] = tile[blockDim.x - 1 - threadIdx.x] + extra[blockDim.x - 1 - threadIdx.x];
}
__global__ void odd_static(float* out) {
  __shared__ float odd[257];  // 1028 B: not a multiple of the 128 B allocation unit
  odd[threadIdx.x % 257] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = odd[(threadIdx.x + 1) % 257];
}

struct compiled {
  const char* name;
  const void* function;
};

const std::vector<compiled>& kernels() {
  static const std::vector<compiled> all = {
      {"light", reinterpret_cast<const void*>(&light)},
      {"heavy", reinterpret_cast<const void*>(&heavy)},
      {"medium", reinterpret_cast<const void*>(&medium)},
      {"bounded_256x4", reinterpret_cast<const void*>(&bounded_256x4)},
      {"bounded_1024x1", reinterpret_cast<const void*>(&bounded_1024x1)},
      {"bounded_768x2", reinterpret_cast<const void*>(&bounded_768x2)},
      {"bounded_96", reinterpret_cast<const void*>(&bounded_96)},
      {"capped_40", reinterpret_cast<const void*>(&capped_40)},
      {"capped_168", reinterpret_cast<const void*>(&capped_168)},
      {"static_tile", reinterpret_cast<const void*>(&static_tile)},
      {"odd_static", reinterpret_cast<const void*>(&odd_static)},
  };
  return all;
}

cudaDeviceProp device_properties() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return {};
  return prop;
}

#define LAUNCHFIT_REQUIRE_SM90_OR_SKIP()                                                           \
  do {                                                                                             \
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();                                                               \
    const cudaDeviceProp p_ = device_properties();                                                 \
    if (p_.major != 9 || p_.minor != 0)                                                            \
      GTEST_SKIP() << "the agreement is checked against the sm_90 table; this device (" << p_.name \
                   << ") is cc " << p_.major << "." << p_.minor;                                   \
  } while (0)

launchfit::device_limits sm90_with_real_sm_count() {
  launchfit::device_limits d = launchfit::device_limits::for_arch("sm_90");
  d.sm_count = device_properties().multiProcessorCount;
  return d;
}

// Opts the kernel in to all the dynamic shared memory the device allows, as launchfit does, then reads
// back what the runtime reports.
launchfit::kernel_resources resources_of(const compiled& k, const cudaDeviceProp& prop) {
  cudaFuncAttributes attr{};
  EXPECT_EQ(cudaFuncGetAttributes(&attr, k.function), cudaSuccess) << k.name;
  const int max_dynamic = static_cast<int>(prop.sharedMemPerBlockOptin - attr.sharedSizeBytes);
  EXPECT_EQ(cudaFuncSetAttribute(k.function, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic),
            cudaSuccess)
      << k.name;
  EXPECT_EQ(cudaFuncGetAttributes(&attr, k.function), cudaSuccess) << k.name;
  launchfit::kernel_resources r = launchfit::kernel_resources::manual(attr.numRegs, attr.sharedSizeBytes,
                                                                      attr.maxThreadsPerBlock, k.name);
  r.local_bytes_per_thread = attr.localSizeBytes;
  r.const_bytes = attr.constSizeBytes;
  r.ptx_version = attr.ptxVersion;
  r.binary_version = attr.binaryVersion;
  r.max_dynamic_smem_bytes = static_cast<std::size_t>(attr.maxDynamicSharedSizeBytes);
  std::printf("%-15s %3d regs, %6zu B static smem, %5zu B local, max %4d threads, max dynamic %zu B\n",
              k.name, r.regs_per_thread, r.static_smem_bytes, r.local_bytes_per_thread,
              r.max_threads_per_block, r.max_dynamic_smem_bytes);
  return r;
}

TEST(OccupancyAgreement, Sm90TableMatchesTheDevice) {
  LAUNCHFIT_REQUIRE_SM90_OR_SKIP();
  const cudaDeviceProp prop = device_properties();
  const launchfit::device_limits d = launchfit::device_limits::for_arch("sm_90");
  EXPECT_EQ(d.regs_per_sm, prop.regsPerMultiprocessor);
  EXPECT_EQ(d.regs_per_block, prop.regsPerBlock);
  EXPECT_EQ(d.smem_per_sm_bytes, prop.sharedMemPerMultiprocessor);
  EXPECT_EQ(d.smem_per_block_bytes, prop.sharedMemPerBlock);
  EXPECT_EQ(d.smem_per_block_optin_bytes, prop.sharedMemPerBlockOptin);
  EXPECT_EQ(d.smem_reserved_per_block_bytes, prop.reservedSharedMemPerBlock);
  EXPECT_EQ(d.max_threads_per_sm, prop.maxThreadsPerMultiProcessor);
  EXPECT_EQ(d.max_blocks_per_sm, prop.maxBlocksPerMultiProcessor);
  EXPECT_EQ(d.max_threads_per_block, prop.maxThreadsPerBlock);
  EXPECT_EQ(d.warp_size, prop.warpSize);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.max_block_dim[i], prop.maxThreadsDim[i]);
    EXPECT_EQ(d.max_grid_dim[i], prop.maxGridSize[i]);
  }
  EXPECT_EQ(d.cooperative_launch, prop.cooperativeLaunch != 0);
  int device = 0, cluster = 0, bus_bits = 0, memory_khz = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device), cudaSuccess);
  EXPECT_EQ(d.cluster_launch, cluster != 0);
  // Part-specific numbers are informational: they differ between H100 and H200 boards.
  std::printf("device: %s, %d SMs, L2 %d B, %d-bit bus at %d kHz (peak %.2f TB/s)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize, bus_bits, memory_khz,
              2.0 * memory_khz * 1e3 * bus_bits / 8 / 1e12);
}

TEST(OccupancyAgreement, ActiveBlocksPerSmForEveryBlockSizeAndSmemSize) {
  LAUNCHFIT_REQUIRE_SM90_OR_SKIP();
  const cudaDeviceProp prop = device_properties();
  const launchfit::device_limits d = sm90_with_real_sm_count();
  long long points = 0, agree = 0;
  for (const compiled& k : kernels()) {
    const launchfit::kernel_resources res = resources_of(k, prop);
    const std::size_t max_dynamic = prop.sharedMemPerBlockOptin - res.static_smem_bytes;
    std::vector<std::size_t> smem_sizes;
    for (std::size_t kib : {0, 1, 4, 16, 48, 100, 200})
      if (kib * 1024 <= max_dynamic) smem_sizes.push_back(kib * 1024);
    smem_sizes.push_back(max_dynamic);
    std::vector<int> block_sizes;
    for (int b = 32; b <= res.max_threads_per_block; b += 32) block_sizes.push_back(b);
    for (int b : {1, 17, 33, 100, 257, 500, 999})  // partial warps round up the same way
      if (b <= res.max_threads_per_block) block_sizes.push_back(b);

    int reported = 0;
    for (int block : block_sizes) {
      for (std::size_t smem : smem_sizes) {
        int expected = -1;
        ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&expected, k.function, block, smem),
                  cudaSuccess)
            << k.name << " block " << block << " smem " << smem;
        const launchfit::occupancy_result got = launchfit::occupancy(d, res, block, smem);
        ++points;
        if (got.active_blocks_per_sm == expected) {
          ++agree;
        } else if (reported++ < 10) {
          ADD_FAILURE() << k.name << ": block " << block << ", dynamic smem " << smem << " B: runtime "
                        << expected << " blocks, launchfit " << got.summary();
        }
      }
    }
  }
  std::printf("occupancy agreement: %lld/%lld points\n", agree, points);
  EXPECT_EQ(agree, points);
  EXPECT_GT(points, 1000);
}

TEST(OccupancyAgreement, MaxPotentialBlockSize) {
  LAUNCHFIT_REQUIRE_SM90_OR_SKIP();
  const cudaDeviceProp prop = device_properties();
  const launchfit::device_limits d = sm90_with_real_sm_count();
  for (const compiled& k : kernels()) {
    const launchfit::kernel_resources res = resources_of(k, prop);
    int min_grid = 0, block = 0;
    ASSERT_EQ(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, k.function, 0, 0), cudaSuccess) << k.name;
    const launchfit::block_size_choice choice = launchfit::max_potential_block_size(d, res);
    EXPECT_EQ(choice.block_threads, block) << k.name;
    EXPECT_EQ(choice.min_grid_blocks, min_grid) << k.name;

    // Shared memory growing with the block, from a capturing lambda.
    const std::size_t bytes_per_thread = 96;
    const auto smem = [bytes_per_thread](int threads) {
      return bytes_per_thread * static_cast<std::size_t>(threads);
    };
    ASSERT_EQ(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&min_grid, &block, k.function, smem),
              cudaSuccess)
        << k.name;
    const launchfit::block_size_choice variable = launchfit::max_potential_block_size(d, res, smem);
    EXPECT_EQ(variable.block_threads, block) << k.name << " with " << bytes_per_thread << " B per thread";
    EXPECT_EQ(variable.min_grid_blocks, min_grid)
        << k.name << " with " << bytes_per_thread << " B per thread";
    std::printf("%-15s max potential block %d (grid %d); with %zu B/thread smem %d (grid %d)\n", k.name,
                choice.block_threads, choice.min_grid_blocks, bytes_per_thread, variable.block_threads,
                variable.min_grid_blocks);
  }
}

// launchfit-calc --cubin on this very program (its embedded sm_90 cubin): the largest block it shows for each
// kernel is the driver's (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, as cudaFuncGetAttributes reports it), for
// kernels bounded by their registers (heavy, capped_168, bounded_96), by their launch bounds, and by neither.
TEST(OccupancyAgreement, CalculatorMaxThreadsPerBlockIsTheDrivers) {
  LAUNCHFIT_REQUIRE_SM90_OR_SKIP();
  const std::string calc = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../../demos/launchfit-calc";
  if (!std::ifstream(calc).good()) GTEST_SKIP() << calc << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  char self[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const std::string out = ::testing::TempDir() + "calc-max-threads-" + std::to_string(::getpid()) + ".json";
  const std::string command = "'" + calc + "' --cubin '" + self + "' --arch sm_90 --json >'" + out + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  // The JSON, one field per line: each kernel's demangled name, then its max_threads_per_block.
  std::map<std::string, int> shown;
  std::ifstream json(out);
  std::string demangled;
  for (std::string line; std::getline(json, line);) {
    const auto value = [&line] { return line.substr(line.find(':') + 1); };
    if (line.find("\"demangled\":") != std::string::npos) {
      demangled = value();
      demangled = demangled.substr(demangled.find('"') + 1);
      demangled = demangled.substr(0, demangled.rfind('"'));
    } else if (line.find("\"max_threads_per_block\":") != std::string::npos) {
      shown[demangled] = std::atoi(value().c_str());
    }
  }
  std::remove(out.c_str());
  int compared = 0, bound_by_registers = 0;
  for (const compiled& k : kernels()) {
    cudaFuncAttributes attr{};
    ASSERT_EQ(cudaFuncGetAttributes(&attr, k.function), cudaSuccess) << k.name;
    const std::string prefix = std::string("(anonymous namespace)::") + k.name + "(";
    int calc_max = -1;
    for (const auto& [name, threads] : shown)
      if (name.rfind(prefix, 0) == 0) calc_max = threads;
    ASSERT_NE(calc_max, -1) << k.name << ": not in launchfit-calc's report";
    EXPECT_EQ(calc_max, attr.maxThreadsPerBlock) << k.name << " (" << attr.numRegs << " registers)";
    std::printf("%-15s %3d regs: launchfit-calc max threads %4d, driver %4d\n", k.name, attr.numRegs,
                calc_max, attr.maxThreadsPerBlock);
    ++compared;
    bound_by_registers += attr.maxThreadsPerBlock < 1024 && attr.numRegs > 64;
  }
  EXPECT_EQ(compared, static_cast<int>(kernels().size()));
  EXPECT_GT(bound_by_registers, 0)
      << "no kernel whose registers bound its block: the comparison proves little";
}

// Planning asks the calculator about candidate blocks and the driver about the chosen one. Plans carry the
// driver's residency; a calculator that disagrees (made to, here) is caught on the next plan, and the driver
// answers every candidate from then on. Last in this file: the calculator stays distrusted for the process.
__global__ void probe_plan_a(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }
__global__ void probe_plan_b(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 2.0f; }

TEST(OccupancyAgreement, PlansTakeTheCalculatorOnlyWhileTheDriverAgrees) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  namespace lf = launchfit;
  constexpr std::size_t n = 1u << 20;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, n * sizeof(float)), cudaSuccess);
  const auto driver_blocks = [](const void* fn, int block) {
    int blocks = 0;
    EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, block, 0), cudaSuccess);
    return blocks;
  };
  for (const auto& spec : {lf::max_occupancy().items(n), lf::max_occupancy(0).items(n)}) {
    const lf::launched ran = lf::launch(probe_plan_a, spec, out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(ran.plan().blocks_per_sm,
              driver_blocks(reinterpret_cast<const void*>(&probe_plan_a), ran.plan().block_threads))
        << ran.plan().to_string();
  }
  const lf::launched bif = lf::launch(probe_plan_a, lf::bytes_in_flight(4).grid_stride(n), out);
  EXPECT_LE(bif.plan().blocks_per_sm,
            driver_blocks(reinterpret_cast<const void*>(&probe_plan_a), bif.plan().block_threads));
  EXPECT_TRUE(lf::detail::calculator_trusted_now());

  lf::detail::calculator_skew_for_tests = 1;  // one block per SM more than the driver, at every size
  const lf::launched ran = lf::launch(probe_plan_b, lf::max_occupancy().items(n), out);
  lf::detail::calculator_skew_for_tests = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(lf::detail::calculator_trusted_now());
  EXPECT_EQ(ran.plan().blocks_per_sm,
            driver_blocks(reinterpret_cast<const void*>(&probe_plan_b), ran.plan().block_threads))
      << ran.plan().to_string();
  std::vector<float> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host.front(), 2.0f);
  EXPECT_EQ(host.back(), 2.0f);
  cudaFree(out);
}

}  // namespace

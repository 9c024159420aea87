// SPDX-License-Identifier: MIT
// Thread-block clusters on a real GPU (sm_90+): grids rounded up to whole clusters, every cluster complete
// (each block reads its peer's shared memory), one-wave grids sized by the driver's cluster occupancy and
// really co-resident, cooperative cluster launches planned or refused before launching, non-portable sizes,
// __cluster_dims__ kernels, and distributed shared memory. Results are checked on the host against poisoned
// outputs.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

// ---- kernels ---------------------------------------------------------------------------------------------

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// What one block sees of its cluster: size, rank, dims, and the blockIdx.x of the next rank, read from that
// block's shared memory (only possible when the whole cluster runs). 4 words per block.
__device__ void record_cluster(unsigned* info) {
  __shared__ unsigned my_block;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) my_block = blockIdx.x;
  cluster.sync();
  const unsigned rank = cluster.block_rank(), size = cluster.num_blocks();
  if (threadIdx.x == 0) {
    const unsigned* peer = cluster.map_shared_rank(&my_block, (rank + 1) % size);
    const dim3 d = cluster.dim_blocks();
    unsigned* mine = info + 4 * std::size_t(blockIdx.x);
    mine[0] = size;
    mine[1] = rank;
    mine[2] = *peer;
    mine[3] = d.x | (d.y << 8) | (d.z << 16);
  }
  cluster.sync();  // the peer's shared memory must outlive the read
}

// One thread per item, plus the cluster record of every block.
__global__ void cluster_items(unsigned* out, unsigned n, unsigned* info) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + 1;
  record_cluster(info);
}

// cluster_items with dynamic shared memory (a function of its own, so its smem limit starts at the default).
__global__ void cluster_items_smem(unsigned* out, unsigned n, unsigned* info) {
  extern __shared__ unsigned scratch[];
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i + 1;
  __syncthreads();
  if (i < n) out[i] = scratch[threadIdx.x];
  record_cluster(info);
}

// The same kernel with its cluster dims compiled in.
__global__ void __cluster_dims__(2, 1, 1) compiled_cluster_items(unsigned* out, unsigned n, unsigned* info) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + 1;
  record_cluster(info);
}

// Every block arrives, then waits (bounded by timeout_ns) until all gridDim.x blocks have arrived: saw_all
// counts the blocks that saw the whole grid, which is every block only when the grid co-resides.
__global__ void co_residency(unsigned* arrived, unsigned* saw_all, unsigned long long timeout_ns) {
  if (threadIdx.x == 0) {
    const unsigned total = gridDim.x * gridDim.y * gridDim.z;
    atomicAdd(arrived, 1u);
    const unsigned long long t0 = now_ns();
    unsigned seen = 0;
    while ((seen = atomicAdd(arrived, 0u)) < total && now_ns() - t0 < timeout_ns) __nanosleep(256);
    if (seen >= total) atomicAdd(saw_all, 1u);
  }
  __syncthreads();
}

// grid.sync() across clusters: every block publishes its id, the grid syncs, every block reads the next
// one's; plus the cluster record.
__global__ void cooperative_cluster(int* slots, int* seen, unsigned* blocks, unsigned* info) {
  cg::grid_group grid = cg::this_grid();
  const unsigned count = gridDim.x;
  if (threadIdx.x == 0) slots[blockIdx.x] = int(blockIdx.x) + 1;
  grid.sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = slots[(blockIdx.x + 1) % count];
  if (blockIdx.x == 0 && threadIdx.x == 0) *blocks = count;
  record_cluster(info);
}

// Distributed shared memory: each block stages its slice of `in` in shared memory; after cluster.sync() it
// writes the slice of the next rank in its cluster, read from that block's shared memory.
__global__ void dsmem_rotate(const int* in, int* out, unsigned n) {
  __shared__ int slice[1024];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  slice[threadIdx.x] = i < n ? in[i] : -1;
  cluster.sync();
  const unsigned next = (cluster.block_rank() + 1) % cluster.num_blocks();
  const int v = cluster.map_shared_rank(slice, next)[threadIdx.x];
  cluster.sync();
  if (i < n) out[i] = v;
}

// ---- host helpers ----------------------------------------------------------------------------------------

using launchfit_test::device_buffer;

constexpr unsigned poison_u32 = 0xffffffffu;

template <class F>
lf::error error_from(F&& f) {
  try {
    f();
  } catch (const lf::error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a launchfit::error, nothing was thrown";
  return lf::error("none", "none", "none");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

unsigned round_up(unsigned v, unsigned m) { return (v + m - 1) / m * m; }

// Blocks of a 1-D grid whose cluster record is not that of a complete cluster of `c` blocks.
std::size_t incomplete_clusters(const std::vector<unsigned>& info, unsigned grid, unsigned c) {
  std::size_t bad = 0;
  for (unsigned b = 0; b < grid; ++b) {
    const unsigned* r = &info[4 * std::size_t(b)];
    const unsigned rank = b % c;
    const unsigned peer = b - rank + (rank + 1) % c;
    bad += r[0] != c || r[1] != rank || r[2] != peer || r[3] != (c | (1u << 8) | (1u << 16));
  }
  return bad;
}

// Clusters of `c` blocks (1-D) of this kernel that co-reside, asked of the driver directly.
template <class... Params>
int driver_active_clusters(void (*kernel)(Params...), const lf::plan& p, unsigned c, bool set_dims = true) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(c, 1, 1);
  cfg.blockDim = dim3(p.block.x, p.block.y, p.block.z);
  cfg.dynamicSmemBytes = p.dynamic_smem_bytes;
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = c;
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  if (set_dims) {
    cfg.attrs = &a;
    cfg.numAttrs = 1;
  }
  int clusters = -1;
  const cudaError_t st =
      cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &cfg);
  EXPECT_EQ(st, cudaSuccess) << cudaGetErrorName(st);
  return clusters;
}

class Clusters : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    int major = 0, clusters = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, 0), cudaSuccess);
    if (major < 9 || !clusters) GTEST_SKIP() << "thread-block clusters need sm_90 or newer";
    ASSERT_EQ(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  }
  int sms_ = 0;
};

}  // namespace

TEST_F(Clusters, ItemsWithAnOddBlockCountAreRoundedToWholeClustersThatAllRun) {
  // max_occupancy's block for large work (small work is planned per size bucket, maybe with smaller blocks).
  const unsigned mb = static_cast<unsigned>(
      lf::plan_for(cluster_items, lf::max_occupancy().items(1u << 22).cluster({2, 1, 1})).block_threads);
  ASSERT_GT(mb, 0u);
  struct scenario {
    unsigned block;  // 0: max_occupancy's
    unsigned n;
  };
  for (const scenario s : {scenario{128, 128 * 8 + 5}, scenario{128, 1}, scenario{0, 1}, scenario{0, 7},
                           scenario{0, mb * 20000 + 1}}) {
    SCOPED_TRACE("block " + std::to_string(s.block) + " n " + std::to_string(s.n));
    // Sized for any block of 32 threads or more, so the buffers hold whatever the policy chooses.
    device_buffer<unsigned> out(std::size_t(s.n) + 2048), info(4 * (std::size_t(s.n) / 32 + 2));
    out.poison();
    info.poison();
    const lf::launched l =
        s.block
            ? lf::launch(cluster_items, lf::fixed(static_cast<int>(s.block)).items(s.n).cluster({2, 1, 1}),
                         out.ptr, s.n, info.ptr)
            : lf::launch(cluster_items, lf::max_occupancy().items(s.n).cluster({2, 1, 1}), out.ptr, s.n,
                         info.ptr);
    const unsigned block = l.block.x;
    if (s.block) EXPECT_EQ(block, s.block);
    if (s.n >= (1u << 18)) EXPECT_EQ(block, mb);
    const unsigned blocks_for_n = (s.n + block - 1) / block;
    EXPECT_EQ(blocks_for_n % 2, 1u) << "the scenario must need an odd number of blocks";
    EXPECT_EQ(l.grid, (lf::dims{round_up(blocks_for_n, 2), 1, 1}));
    EXPECT_EQ(l.plan().options.cluster, (lf::dims{2, 1, 1}));
    EXPECT_FALSE(l.plan().options.cluster_from_kernel);
    EXPECT_GT(l.plan().resident_clusters, 0);
    const auto o = out.download();
    std::size_t wrong = 0;
    for (unsigned i = 0; i < s.n; ++i) wrong += o[i] != i + 1;
    EXPECT_EQ(wrong, 0u);
    for (std::size_t i = s.n; i < o.size(); ++i) ASSERT_EQ(o[i], poison_u32) << "written past n at " << i;
    ASSERT_LE(4 * std::size_t(l.grid.x), info.n);
    EXPECT_EQ(incomplete_clusters(info.download(), l.grid.x, 2), 0u);
  }
}

TEST_F(Clusters, OneWaveIsTheDriversClusterOccupancyAndReallyCoResides) {
  const auto spec = lf::max_occupancy(0).cluster({4, 1, 1});
  const lf::plan& p = lf::plan_for(co_residency, spec);
  const int clusters = driver_active_clusters(co_residency, p, 4);
  ASSERT_GT(clusters, 0);
  EXPECT_EQ(p.resident_clusters, clusters);
  EXPECT_EQ(p.resident_blocks(), 4LL * clusters);
  const long long per_sm_plan = static_cast<long long>(p.blocks_per_sm) * sms_;
  std::printf(
      "clusters of 4 at block %d: the driver co-schedules %d clusters = %d blocks; blocks/SM x SMs = %lld\n",
      p.block_threads, clusters, 4 * clusters, per_sm_plan);
  EXPECT_LE(4LL * clusters, per_sm_plan);

  device_buffer<unsigned> counters(2);
  counters.zero();
  const lf::launched l = lf::launch(co_residency, spec, counters.ptr, counters.ptr + 1, 2'000'000'000ULL);
  EXPECT_EQ(l.grid, (lf::dims{static_cast<unsigned>(4 * clusters), 1, 1}));
  EXPECT_DOUBLE_EQ(l.waves(), 1.0);
  auto c = counters.download();
  EXPECT_EQ(c[0], l.grid.x);
  EXPECT_EQ(c[1], l.grid.x) << "blocks of the planned one-wave grid did not all run at once";

  // What a blocks-per-SM plan would launch, where it is larger: the same probe (short timeout) shows whether
  // it co-resides. Informational: the driver's cluster occupancy is the plan's truth.
  const unsigned over = static_cast<unsigned>(per_sm_plan / 4 * 4);
  if (over > l.grid.x) {
    counters.zero();
    lf::launch(co_residency, lf::fixed(p.block_threads, static_cast<int>(over)).cluster({4, 1, 1}),
               counters.ptr, counters.ptr + 1, 200'000'000ULL);
    c = counters.download();
    std::printf("a grid of blocks/SM x SMs = %u blocks in clusters of 4: %u of them saw the whole grid\n",
                over, c[1]);
  }
}

TEST_F(Clusters, CooperativeClustersOf8ArePlannedToCoResideOrRefusedBeforeLaunch) {
  const auto spec = lf::cooperative().cluster({8, 1, 1});
  const lf::plan* planned = nullptr;
  try {
    planned = &lf::plan_for(cooperative_cluster, spec);
  } catch (const lf::error& e) {
    EXPECT_NE(e.call(), "cuLaunchKernelEx") << e.what();
    std::printf("cooperative clusters of 8 refused while planning: %s\n", e.what());
    return;
  }
  const lf::plan& p = *planned;
  EXPECT_TRUE(p.options.cooperative);
  EXPECT_EQ(p.options.cluster, (lf::dims{8, 1, 1}));
  ASSERT_GT(p.resident_clusters, 0);
  const unsigned grid = static_cast<unsigned>(p.resident_blocks());
  EXPECT_EQ(grid, 8u * static_cast<unsigned>(p.resident_clusters));
  std::printf("cooperative clusters of 8 at block %d: %d clusters = %u blocks (blocks/SM x SMs = %d)\n",
              p.block_threads, p.resident_clusters, grid, p.blocks_per_sm * sms_);
  device_buffer<int> slots(grid + 8), seen(grid + 8);
  device_buffer<unsigned> blocks(1), info(4 * std::size_t(grid + 8));

  auto run = [&](const lf::launched& l, unsigned expect_grid) {
    EXPECT_EQ(l.grid, (lf::dims{expect_grid, 1, 1}));
    EXPECT_EQ(blocks.download()[0], expect_grid);
    const auto h = seen.download();
    std::size_t wrong = 0;
    for (unsigned b = 0; b < expect_grid; ++b) wrong += h[b] != int((b + 1) % expect_grid) + 1;
    EXPECT_EQ(wrong, 0u) << "grid.sync() did not hold across clusters";
    EXPECT_EQ(incomplete_clusters(info.download(), expect_grid, 8), 0u);
  };
  seen.poison();
  info.poison();
  try {
    run(lf::launch(cooperative_cluster, spec, slots.ptr, seen.ptr, blocks.ptr, info.ptr), grid);
  } catch (const lf::error& e) {
    // A refusal is allowed only before launching; a driver failure means the plan promised co-residency the
    // driver does not grant.
    EXPECT_NE(e.call(), "cuLaunchKernelEx")
        << "the driver refused a planned cooperative cluster launch: " << e.what();
    return;
  }
  // Caller grids: fewer whole clusters run; more are refused before launching; a partial cluster is refused.
  if (grid > 8) {
    seen.poison();
    info.poison();
    run(lf::launch(cooperative_cluster, lf::cooperative().cluster({8, 1, 1}).grid({grid - 8, 1, 1}),
                   slots.ptr, seen.ptr, blocks.ptr, info.ptr),
        grid - 8);
  }
  seen.poison();
  lf::error e = error_from([&] {
    lf::launch(cooperative_cluster, lf::cooperative().cluster({8, 1, 1}).grid({grid + 8, 1, 1}), slots.ptr,
               seen.ptr, blocks.ptr, info.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::cooperative_too_large) << e.what();
  EXPECT_NE(e.call(), "cuLaunchKernelEx") << e.what();
  EXPECT_TRUE(contains(e.message(), std::to_string(grid + 8))) << e.what();
  EXPECT_TRUE(contains(e.message(), std::to_string(grid))) << e.what();
  e = error_from([&] {
    lf::launch(cooperative_cluster, lf::cooperative().cluster({8, 1, 1}).grid({12, 1, 1}), slots.ptr,
               seen.ptr, blocks.ptr, info.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::cluster) << e.what();
  const auto h = seen.download();
  EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](int v) { return v == -1; })) << "a refused launch ran";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Clusters, SixteenBlocksNeedTheNonPortableOptIn) {
  const unsigned n = 128 * 16 * 3 + 1;  // 49 blocks: rounded to 64
  device_buffer<unsigned> out(64 * 128), info(4 * 64);
  out.poison();
  info.poison();
  const lf::error refused = error_from([&] {
    lf::launch(cluster_items, lf::fixed(128).items(n).cluster({16, 1, 1}), out.ptr, n, info.ptr);
  });
  EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  EXPECT_TRUE(contains(refused.message(), "portable maximum of 8")) << refused.what();
  EXPECT_TRUE(contains(refused.message(), "cluster(dims, true)")) << refused.what();
  auto o = out.download();
  EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](unsigned v) { return v == poison_u32; }))
      << "a refused launch ran";

  // With the opt-in: launched when the driver co-schedules 16 blocks of 128 threads, else refused, by
  // launchfit, before launching.
  LF_CUDA_CHECK(cudaFuncSetAttribute(cluster_items, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(16, 1, 1);
  cfg.blockDim = dim3(128, 1, 1);
  int most = 0;
  LF_CUDA_CHECK(
      cudaOccupancyMaxPotentialClusterSize(&most, reinterpret_cast<const void*>(cluster_items), &cfg));
  std::printf("cuOccupancyMaxPotentialClusterSize at 128 threads with the non-portable attribute: %d\n",
              most);
  try {
    const lf::launched l =
        lf::launch(cluster_items, lf::fixed(128).items(n).cluster({16, 1, 1}, true), out.ptr, n, info.ptr);
    EXPECT_GE(most, 16) << "launched a cluster size the driver says does not co-schedule";
    EXPECT_EQ(l.grid, (lf::dims{64, 1, 1}));
    EXPECT_EQ(l.plan().options.cluster, (lf::dims{16, 1, 1}));
    o = out.download();
    std::size_t wrong = 0;
    for (unsigned i = 0; i < n; ++i) wrong += o[i] != i + 1;
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(incomplete_clusters(info.download(), 64, 16), 0u);
  } catch (const lf::error& e) {
    EXPECT_LT(most, 16) << "refused although the driver co-schedules 16: " << e.what();
    EXPECT_NE(e.call(), "cuLaunchKernelEx") << e.what();
    // check_cluster_size (errc::cluster) or, when no such cluster co-resides at all, validate (invalid_plan).
    EXPECT_TRUE(e.code() == lf::errc::cluster || e.code() == lf::errc::invalid_plan) << e.what();
    EXPECT_TRUE(contains(e.message(), "cuOccupancyMaxPotentialClusterSize") ||
                contains(e.message(), "cuOccupancyMaxActiveClusters"))
        << e.what();
  }
}

// A cluster above the device's own maximum (32 > 16 on an H200) is refused naming that maximum, before any
// policy plans (it used to read "no plan co-resides").
TEST_F(Clusters, AClusterAboveTheDevicesMaximumNamesTheMaximum) {
  const unsigned n = 128 * 32 * 2;
  device_buffer<unsigned> out(n), info(4 * 64);
  out.poison();
  const lf::error refused = error_from([&] {
    lf::launch(cluster_items, lf::fixed(128).items(n).cluster({32, 1, 1}, true), out.ptr, n, info.ptr);
  });
  EXPECT_EQ(refused.code(), lf::errc::cluster) << refused.what();
  EXPECT_TRUE(contains(refused.message(), "co-schedules in one cluster")) << refused.what();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(32, 1, 1);
  cfg.blockDim = dim3(32, 1, 1);
  int most = 0;
  LF_CUDA_CHECK(cudaFuncSetAttribute(cluster_items, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  LF_CUDA_CHECK(
      cudaOccupancyMaxPotentialClusterSize(&most, reinterpret_cast<const void*>(cluster_items), &cfg));
  EXPECT_TRUE(contains(refused.message(), ": " + std::to_string(most) + " blocks")) << most << " " << refused.what();
  std::printf("cluster 32: %s\n", refused.what());
  const auto o = out.download();
  EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](unsigned v) { return v == poison_u32; })) << "a refused launch ran";
}

// Clusters of blocks that ask more dynamic smem than a function's default limit (48 KB): launchfit raises the
// limit for the plan and asks cuOccupancyMaxPotentialClusterSize after it has (the driver's answer below the
// raised limit is printed: it counts no cluster there). A size that co-schedules runs, every item and cluster
// exact; one block more than the driver co-schedules at the plan's smem is refused before anything launches.
TEST_F(Clusters, ClustersOfBlocksAboveTheDefaultSmemLimitAreCheckedAtThePlansSmem) {
  const unsigned n = 128 * 64;
  const std::size_t smem = 200 * 1024;  // one block per SM
  const auto most_at = [&](std::size_t bytes, cudaError_t* st) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(16, 1, 1);
    cfg.blockDim = dim3(128, 1, 1);
    cfg.dynamicSmemBytes = bytes;
    int most = -1;
    *st = cudaOccupancyMaxPotentialClusterSize(&most, reinterpret_cast<const void*>(cluster_items_smem), &cfg);
    (void)cudaGetLastError();
    return most;
  };
  cudaError_t before_st = cudaSuccess;
  const int before = most_at(smem, &before_st);
  std::printf("cuOccupancyMaxPotentialClusterSize at 128 threads and %zu B, the function's limit still 48 KB: "
              "%d (%s)\n",
              smem, before, cudaGetErrorName(before_st));
  device_buffer<unsigned> out(n), info(4 * (n / 128));
  out.poison();
  const lf::launched l = lf::launch(cluster_items_smem, lf::fixed(128).items(n).smem(smem).cluster({2, 1, 1}),
                                    out.ptr, n, info.ptr);
  EXPECT_EQ(l.dynamic_smem_bytes, smem);
  EXPECT_EQ(l.grid, (lf::dims{n / 128, 1, 1}));
  const auto o = out.download();
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += o[i] != i + 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(incomplete_clusters(info.download(), l.grid.x, 2), 0u);

  LF_CUDA_CHECK(cudaFuncSetAttribute(cluster_items_smem, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaError_t after_st = cudaSuccess;
  const int after = most_at(smem, &after_st);
  std::printf("the same with the limit raised and non-portable sizes allowed: %d (%s)\n", after,
              cudaGetErrorName(after_st));
  ASSERT_EQ(after_st, cudaSuccess);
  ASSERT_GE(after, 2);
  if (after >= 16) {
    std::printf("every cluster size up to 16 co-schedules at this smem here: no refusal to check\n");
    return;
  }
  const unsigned too_many = static_cast<unsigned>(after) + 1;
  out.poison();
  const lf::error refused = error_from([&] {
    lf::launch(cluster_items_smem, lf::fixed(128).items(n).smem(smem).cluster({too_many, 1, 1}, true), out.ptr,
               n, info.ptr);
  });
  std::printf("cluster %u at %zu B: %s\n", too_many, smem, refused.what());
  EXPECT_TRUE(refused.code() == lf::errc::cluster || refused.code() == lf::errc::invalid_plan) << refused.what();
  EXPECT_NE(refused.call(), "cuLaunchKernelEx") << refused.what();
  const auto untouched = out.download();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](unsigned v) { return v == poison_u32; }))
      << "a refused launch ran";
}

// A cooperative launch of clusters whose blocks ask more dynamic smem than the function's default limit: its
// clusters are counted by the driver once the limit is raised (the blocks-per-SM estimate above the limit can be
// more than co-reside, and the driver refused that grid), so the grid co-resides and every item is written.
TEST_F(Clusters, ACooperativeClusterGridAboveTheDefaultSmemLimitCoResides) {
  const std::size_t smem = 200 * 1024;  // one block per SM
  const auto spec = lf::cooperative().smem(smem).cluster({4, 1, 1});
  const lf::plan& p = lf::plan_for(cluster_items_smem, spec);
  const unsigned grid = lf::grid_for(p, spec.work_shape()).x;
  ASSERT_GT(grid, 0u);
  EXPECT_EQ(grid % 4, 0u);
  const int clusters = driver_active_clusters(cluster_items_smem, p, 4);
  std::printf("cooperative clusters of 4 at %zu B: grid %u, the driver co-schedules %d clusters (%d blocks); "
              "estimate from blocks per SM: %d\n",
              smem, grid, clusters, 4 * clusters, p.blocks_per_sm * sms_ / 4);
  EXPECT_LE(static_cast<long long>(grid), 4LL * clusters) << p.to_string();
  const unsigned n = grid * static_cast<unsigned>(p.block_threads);
  device_buffer<unsigned> out(n), info(4 * std::size_t(grid));
  out.poison();
  const lf::launched l = lf::launch(cluster_items_smem, spec, out.ptr, n, info.ptr);
  EXPECT_EQ(l.grid.x, grid);
  const auto o = out.download();
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += o[i] != i + 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(incomplete_clusters(info.download(), grid, 4), 0u);
}

TEST_F(Clusters, CompiledClusterDimsAreHonouredWithoutACallAndAConflictIsRefused) {
  const unsigned n = 1u << 20;
  const auto spec = lf::max_occupancy().items(n);
  const lf::plan& p = lf::plan_for(compiled_cluster_items, spec);
  EXPECT_EQ(p.options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_TRUE(p.options.cluster_from_kernel);
  EXPECT_GT(p.resident_clusters, 0);
  EXPECT_EQ(p.resident_clusters, driver_active_clusters(compiled_cluster_items, p, 2, false));

  const unsigned block = static_cast<unsigned>(p.block_threads);
  // 20001 blocks and 1 block (small work: planned in its own size bucket) are odd counts before rounding.
  for (unsigned items : {n, block * 20000 + 1, 1u}) {
    SCOPED_TRACE("n " + std::to_string(items));
    device_buffer<unsigned> out(std::size_t(items) + 2048), info(4 * (std::size_t(items) / 32 + 2));
    out.poison();
    info.poison();
    const lf::launched l =
        lf::launch(compiled_cluster_items, lf::max_occupancy().items(items), out.ptr, items, info.ptr);
    if (items >= (1u << 18)) EXPECT_EQ(&l.plan(), &p);
    EXPECT_EQ(l.plan().options.cluster, (lf::dims{2, 1, 1}));
    EXPECT_TRUE(l.plan().options.cluster_from_kernel);
    const unsigned blocks_for_n = (items + l.block.x - 1) / l.block.x;
    EXPECT_EQ(l.grid, (lf::dims{round_up(blocks_for_n, 2), 1, 1}));
    const auto o = out.download();
    std::size_t wrong = 0;
    for (unsigned i = 0; i < items; ++i) wrong += o[i] != i + 1;
    EXPECT_EQ(wrong, 0u);
    ASSERT_LE(4 * std::size_t(l.grid.x), info.n);
    EXPECT_EQ(incomplete_clusters(info.download(), l.grid.x, 2), 0u);
  }
  // The same dims asked explicitly: fine. Other dims: refused, nothing launched.
  device_buffer<unsigned> out(1024 * 8), info(4 * 8);
  out.poison();
  const lf::launched same = lf::launch(
      compiled_cluster_items, lf::fixed(128).items(128 * 3).cluster({2, 1, 1}), out.ptr, 128u * 3, info.ptr);
  EXPECT_EQ(same.grid, (lf::dims{4, 1, 1}));
  EXPECT_EQ(same.plan().options.cluster, (lf::dims{2, 1, 1}));
  EXPECT_EQ(incomplete_clusters(info.download(), 4, 2), 0u);
  out.poison();
  const lf::error e = error_from([&] {
    lf::launch(compiled_cluster_items, lf::fixed(128).items(128 * 3).cluster({4, 1, 1}), out.ptr, 128u * 3,
               info.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::cluster) << e.what();
  EXPECT_TRUE(contains(e.message(), "__cluster_dims__")) << e.what();
  const auto o = out.download();
  EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](unsigned v) { return v == poison_u32; }))
      << "a refused launch ran";
}

TEST_F(Clusters, DistributedSharedMemoryRotatesSlicesWithinEachCluster) {
  const unsigned n = 1'000'003;
  std::vector<int> h(n);
  for (unsigned i = 0; i < n; ++i) h[i] = int(i * 7u + 3u);
  device_buffer<int> in(n), out(n + 1);
  in.upload(h);
  auto check = [&](const lf::launched& l, unsigned c) {
    SCOPED_TRACE(l.plan().to_string());
    const unsigned block = l.block.x;
    EXPECT_EQ(l.grid.x % c, 0u);
    EXPECT_EQ(l.grid.x, round_up((n + block - 1) / block, c));
    const auto o = out.download();
    std::size_t wrong = 0;
    for (unsigned i = 0; i < n; ++i) {
      const unsigned b = i / block, t = i % block, rank = b % c;
      const unsigned src = (b - rank + (rank + 1) % c) * block + t;
      wrong += o[i] != (src < n ? h[src] : -1);
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(o[n], -1);
  };
  for (unsigned c : {2u, 4u, 8u}) {
    SCOPED_TRACE("cluster " + std::to_string(c));
    out.poison();
    check(lf::launch(dsmem_rotate, lf::fixed(96).items(n).cluster({c, 1, 1}), static_cast<const int*>(in.ptr),
                     out.ptr, n),
          c);
    out.poison();
    check(lf::launch(dsmem_rotate, lf::max_occupancy().items(n).cluster({c, 1, 1}),
                     static_cast<const int*>(in.ptr), out.ptr, n),
          c);
  }
}

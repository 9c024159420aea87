// SPDX-License-Identifier: MIT
// cluster_dsmem — a cluster-wide histogram in distributed shared memory, launched with .cluster({4, 1, 1}).
//
// 16384 bins do not fit one block's shared memory cheaply, but a cluster of 4 blocks shares its shared
// memory (sm_90+): each block holds a quarter of the bins (16 KB), and every thread adds each value straight
// into the block that owns its bin, through cooperative_groups::this_cluster().map_shared_rank(). Each
// cluster then flushes its one histogram to global memory: a quarter of the global atomics of per-block
// histograms, and four times the bins per block.
//
// Which blocks co-reside is the driver's call for clusters (cuOccupancyMaxActiveClusters; there is no
// offline formula), so max_occupancy() with a cluster picks the block size with the most threads in
// co-resident clusters, and grid_stride(n) sizes the grid to one wave of them. The demo prints the plan, the
// clusters per wave, checks them against cuOccupancyMaxActiveClusters called directly (and the block
// against a sweep of every block size), and checks the histogram exactly against the CPU.
//
//   build/demos/cluster_dsmem

#include <cooperative_groups.h>
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <launchfit/device.hpp>
#include <launchfit/launch.hpp>
#include <vector>

#include "demo.hpp"

namespace cg = cooperative_groups;
using launchfit_demo::device_buffer;

namespace {
constexpr unsigned cluster_blocks = 4;
constexpr unsigned bins = 16384;
constexpr unsigned bins_per_block = bins / cluster_blocks;  // 4096 bins = 16 KB of dynamic shared memory
}  // namespace

// Grid-stride over the values; each block owns bins [rank * per_block, (rank + 1) * per_block) of its
// cluster's histogram. Needs a cluster of bins / per_block blocks (checked: a wrong launch sets *bad).
__global__ void cluster_histogram(const unsigned* __restrict__ values, unsigned long long n, unsigned* hist,
                                  unsigned per_block, unsigned* bad) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ unsigned slice[];
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.num_blocks() * per_block != bins) {  // uniform over the grid: every block returns
    if (threadIdx.x == 0) atomicOr(bad, 1u);
    return;
  }
  for (unsigned b = threadIdx.x; b < per_block; b += blockDim.x) slice[b] = 0;
  cluster.sync();  // every slice is zeroed before any block adds to it
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const unsigned v = values[i] % bins;
    unsigned* owner = cluster.map_shared_rank(slice, v / per_block);  // another block's shared memory
    atomicAdd(owner + v % per_block, 1u);
  }
  cluster.sync();  // every add has landed, and no block exits while others still write to its slice
  const unsigned first = cluster.block_rank() * per_block;
  for (unsigned b = threadIdx.x; b < per_block; b += blockDim.x) {
    if (slice[b]) atomicAdd(&hist[first + b], slice[b]);
  }
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicOr(bad, 2u);  // built without sm_90 code
#endif
}

namespace {

// cuOccupancyMaxActiveClusters from the driver, found through the runtime (the demo does not link libcuda,
// so it still starts, and says so, on a machine without a driver).
int driver_active_clusters(CUfunction f, unsigned block, std::size_t smem) {
  using fn_type = CUresult(CUDAAPI*)(int*, CUfunction, const CUlaunchConfig*);
  static fn_type fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LAUNCHFIT_DEMO_CHECK(cudaGetDriverEntryPointByVersion("cuOccupancyMaxActiveClusters", &p, 11070,
                                                          cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !p) {
      throw launchfit::error("cudaGetDriverEntryPointByVersion", "CUDA_ERROR_NOT_FOUND",
                             "the driver has no cuOccupancyMaxActiveClusters");
    }
    return reinterpret_cast<fn_type>(p);
  }();
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = cluster_blocks;
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cluster_blocks;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = block;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (fn(&clusters, f, &cfg) != CUDA_SUCCESS) return 0;  // a block size that cannot form a cluster
  return clusters;
}

int run_cluster() {
  const launchfit::device_limits dev = launchfit::device_limits::query(0);
  LAUNCHFIT_DEMO_CHECK(cudaSetDevice(0));
  std::printf("cluster_dsmem: %s (%s, %d SMs)\n\n", dev.name.c_str(), dev.arch().c_str(), dev.sm_count);
  if (dev.cc_major < 9) {
    std::printf(
        "cluster_dsmem: thread-block clusters need compute capability 9.0 or newer; this GPU is %d.%d. "
        "Nothing was launched (exit 0).\n",
        dev.cc_major, dev.cc_minor);
    return 0;
  }
  cudaFuncAttributes fa{};
  LAUNCHFIT_DEMO_CHECK(cudaFuncGetAttributes(&fa, cluster_histogram));
  if (fa.ptxVersion < 90) {  // the kernel body is compiled for sm_90+ only
    std::printf(
        "cluster_dsmem: FAILED: the kernel was compiled for compute_%d; build with "
        "CMAKE_CUDA_ARCHITECTURES=90\n",
        fa.ptxVersion);
    return 1;
  }

  const unsigned long long n = (1ULL << 26) + 12345;  // 64 Mi values and a tail
  std::vector<unsigned> values(n);
  std::uint64_t s = 0x2545f4914f6cdd1dULL;
  for (auto& v : values) {  // skewed: low bins hot, so the owners differ in load
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const unsigned r = static_cast<unsigned>(s >> 33);
    v = (r & 3u) == 0 ? (r >> 2) % 512u : (r >> 2) % bins;
  }
  std::vector<unsigned> want(bins, 0);
  for (unsigned v : values) ++want[v % bins];

  device_buffer<unsigned> dvalues(n), dhist(bins), dbad(1);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(dvalues.get(), values.data(), dvalues.bytes(), cudaMemcpyHostToDevice));
  LAUNCHFIT_DEMO_CHECK(cudaMemset(dhist.get(), 0, dhist.bytes()));
  LAUNCHFIT_DEMO_CHECK(cudaMemset(dbad.get(), 0, dbad.bytes()));

  // ---- the plan: block size by cluster occupancy, one wave of co-resident clusters
  // -----------------------------
  const std::size_t smem = bins_per_block * sizeof(unsigned);
  auto spec = launchfit::max_occupancy().cluster({cluster_blocks, 1, 1}).smem(smem).grid_stride(n);
  std::printf("histogram of %llu values into %u bins, %u bins (%zu KB) per block, clusters of %u blocks\n", n,
              bins, bins_per_block, smem / 1024, cluster_blocks);
  std::printf(
      "    call:      launchfit::launch(cluster_histogram, launchfit::max_occupancy().cluster({4, 1, 1})"
      ".smem(16 KB).grid_stride(n), values, n, hist, %u, bad);\n",
      bins_per_block);

  cudaEvent_t start = nullptr, stop = nullptr;
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&start));
  LAUNCHFIT_DEMO_CHECK(cudaEventCreate(&stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(start));
  const launchfit::launched ran =
      launchfit::launch(cluster_histogram, spec, dvalues.get(), n, dhist.get(), bins_per_block, dbad.get());
  LAUNCHFIT_DEMO_CHECK(cudaEventRecord(stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventSynchronize(stop));
  LAUNCHFIT_DEMO_CHECK(cudaGetLastError());
  float ms = 0;
  LAUNCHFIT_DEMO_CHECK(cudaEventElapsedTime(&ms, start, stop));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(start));
  LAUNCHFIT_DEMO_CHECK(cudaEventDestroy(stop));

  const launchfit::plan& p = ran.plan();
  launchfit_demo::print_plan(p, spec.work_shape());
  std::printf(
      "    launched:  grid %s x block %s = %llu clusters, %.2f waves; %d clusters (%lld blocks) per wave\n",
      ran.grid.to_string().c_str(), ran.block.to_string().c_str(), ran.grid.count() / cluster_blocks,
      ran.waves(), p.resident_clusters, p.resident_blocks());
  bool ok = true;

  // ---- the driver, asked directly
  // --------------------------------------------------------------------------
  cudaFunction_t rf = nullptr;
  LAUNCHFIT_DEMO_CHECK(cudaGetFuncBySymbol(&rf, reinterpret_cast<const void*>(&cluster_histogram)));
  const CUfunction f = reinterpret_cast<CUfunction>(rf);
  const int direct = driver_active_clusters(f, p.block.x, p.dynamic_smem_bytes);
  const bool clusters_ok =
      p.resident_clusters == direct && p.options.cluster == launchfit::dims{cluster_blocks, 1, 1};
  std::printf(
      "    check:     clusters per wave %d == cuOccupancyMaxActiveClusters(block %u, smem %zu, cluster 4) "
      "%d  %s\n",
      p.resident_clusters, p.block.x, p.dynamic_smem_bytes, direct, clusters_ok ? "OK" : "MISMATCH");
  ok &= clusters_ok;
  const bool wave_ok = ran.grid.x % cluster_blocks == 0 &&
                       ran.grid.count() == static_cast<unsigned long long>(p.resident_blocks());
  std::printf("    check:     grid %s is whole clusters and exactly one wave (%lld blocks)  %s\n",
              ran.grid.to_string().c_str(), p.resident_blocks(), wave_ok ? "OK" : "MISMATCH");
  ok &= wave_ok;

  // Every block size a warp multiple: the most threads in co-resident clusters, per the driver.
  unsigned best_block = 0;
  long long best_threads = 0;
  const int limit = std::min(fa.maxThreadsPerBlock, 1024);
  for (int block = 32; block <= limit; block += 32) {
    const long long threads =
        static_cast<long long>(driver_active_clusters(f, static_cast<unsigned>(block), smem)) *
        cluster_blocks * block;
    if (threads >= best_threads) {  // ties to the larger block (launchfit's tie rule may pick another)
      best_threads = threads;
      best_block = static_cast<unsigned>(block);
    }
  }
  const long long chosen_threads = static_cast<long long>(direct) * cluster_blocks * p.block_threads;
  const bool block_ok = chosen_threads == best_threads;
  std::printf(
      "    check:     block %d: %lld threads in co-resident clusters; best of a sweep of 32..%d: %lld (block "
      "%u)  %s\n",
      p.block_threads, chosen_threads, limit, best_threads, best_block, block_ok ? "OK" : "MISMATCH");
  ok &= block_ok;

  // ---- the histogram
  // -----------------------------------------------------------------------------------------
  std::vector<unsigned> got(bins), bad(1);
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(got.data(), dhist.get(), dhist.bytes(), cudaMemcpyDeviceToHost));
  LAUNCHFIT_DEMO_CHECK(cudaMemcpy(bad.data(), dbad.get(), dbad.bytes(), cudaMemcpyDeviceToHost));
  unsigned wrong = 0, first_wrong = bins;
  unsigned long long total = 0;
  for (unsigned b = 0; b < bins; ++b) {
    total += got[b];
    if (got[b] != want[b]) {
      ++wrong;
      if (first_wrong == bins) first_wrong = b;
    }
  }
  const bool hist_ok = wrong == 0 && bad[0] == 0;
  std::printf("    ran:       %.3f ms (first launch: includes planning), %.1f G values/s\n", ms,
              n / (ms * 1e6));
  if (bad[0]) std::printf("    kernel:    reported a wrong launch (code %u)\n", bad[0]);
  if (wrong) {
    std::printf("    verified:  %u of %u bins differ; first: bin %u got %u, expected %u  MISMATCH\n", wrong,
                bins, first_wrong, got[first_wrong], want[first_wrong]);
  } else {
    std::printf("    verified:  all %u bins equal the CPU's exactly (%llu values counted)  %s\n", bins, total,
                hist_ok ? "OK" : "MISMATCH");
  }
  ok &= hist_ok;
  LAUNCHFIT_DEMO_CHECK(cudaDeviceSynchronize());
  std::printf(
      "\ncluster_dsmem: %s\n",
      ok ? "block chosen by cluster occupancy, one wave of clusters, histogram matches the CPU" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a cluster-wide histogram in distributed shared memory, sized by cluster occupancy",
               "cluster_dsmem"};
  if (const int rc = launchfit_demo::parse_command_line(app, argc, argv); rc >= 0) return rc;
  return launchfit_demo::run("cluster_dsmem", run_cluster);
}

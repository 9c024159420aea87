// SPDX-License-Identifier: MIT
// Launch shapes on a real GPU: 2-D and 3-D work, block rules, kernel families, what launch() returns,
// from_plan() arguments, caller grids, SM budgets and waves. Every result is checked on the host, element
// by element, against outputs poisoned before the launch; each block rule is shown to matter first (a
// tree reduction that sums wrong with a block of 224) before it is shown to be honoured.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/args.hpp"
#include "launchfit/family.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

// ---- kernels ---------------------------------------------------------------------------------------------

// Tiled transpose of an ny x nx matrix (row-major) into nx x ny, for blocks {32, by <= 32}: a block loads a
// 32 x by tile and writes it transposed. One thread per input element, as items({nx, ny}) sizes the grid.
__global__ void transpose_tiled(const float* in, float* out, unsigned nx, unsigned ny, unsigned* bad_shape) {
  __shared__ float tile[32][33];
  if (blockDim.x != 32 || blockDim.y > 32 || blockDim.z != 1) {
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(bad_shape, 1u);
    return;
  }
  const unsigned by = blockDim.y;
  const unsigned x0 = blockIdx.x * 32, y0 = blockIdx.y * by;
  const unsigned x = x0 + threadIdx.x, y = y0 + threadIdx.y;
  if (x < nx && y < ny) tile[threadIdx.y][threadIdx.x] = in[std::size_t(y) * nx + x];
  __syncthreads();
  const unsigned t = threadIdx.y * 32 + threadIdx.x;
  const unsigned r = t / by, c = t % by;  // output row x0 + r, column y0 + c
  const unsigned ox = x0 + r, oy = y0 + c;
  if (ox < nx && oy < ny) out[std::size_t(ox) * ny + oy] = tile[c][r];
}

// out[z][y][x] = its linear index + 1; the first thread records the launch's grid and block.
__global__ void index3d(unsigned* out, unsigned nx, unsigned ny, unsigned nz, unsigned* shape) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
  const unsigned z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz)
    out[(std::size_t(z) * ny + y) * nx + x] = unsigned((std::size_t(z) * ny + y) * nx + x) + 1;
  if (x == 0 && y == 0 && z == 0) {
    shape[0] = gridDim.x, shape[1] = gridDim.y, shape[2] = gridDim.z;
    shape[3] = blockDim.x, shape[4] = blockDim.y, shape[5] = blockDim.z;
  }
}

// The classic shared-memory tree reduction: halves the active threads each step, so it silently drops
// elements when blockDim.x is not a power of two. Writes one partial sum per block.
__global__ void tree_reduce(const unsigned* in, unsigned* partial, unsigned n,
                            unsigned* non_power_of_two_runs) {
  extern __shared__ unsigned s[];
  const unsigned tid = threadIdx.x;
  const unsigned i = blockIdx.x * blockDim.x + tid;
  if (tid == 0 && blockIdx.x == 0 && (blockDim.x & (blockDim.x - 1)) != 0)
    atomicAdd(non_power_of_two_runs, 1u);
  s[tid] = i < n ? in[i] : 0u;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = s[0];
}

// The same reduction written for one block size B; counts launches with another block (the wrong member).
template <int B>
__global__ void __launch_bounds__(B)
    reduce_member(const unsigned* in, unsigned* partial, unsigned n, unsigned* member) {
  __shared__ unsigned s[B];
  if (blockDim.x != B) {
    if (threadIdx.x == 0) atomicAdd(member + 1, 1u);
    return;
  }
  const unsigned tid = threadIdx.x;
  const unsigned i = blockIdx.x * B + tid;
  s[tid] = i < n ? in[i] : 0u;
  __syncthreads();
#pragma unroll
  for (unsigned stride = B / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = s[0];
  if (tid == 0 && blockIdx.x == 0) atomicExch(member, unsigned(B));
}

// Records the grid and block it ran with.
__global__ void probe_shape(unsigned* shape) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0 &&
      threadIdx.z == 0) {
    shape[0] = gridDim.x, shape[1] = gridDim.y, shape[2] = gridDim.z;
    shape[3] = blockDim.x, shape[4] = blockDim.y, shape[5] = blockDim.z;
  }
}

// n-body-like: every thread sums all n bodies, a tile of blockDim.x bodies at a time through shared memory;
// `tiles` must be ceil(n / blockDim.x) (a from_plan() argument). Counts launches given another tile count,
// and records the block sizes it ran with (bit b-1 for b warps).
__global__ void tiled_sum(const int* x, long long* out, unsigned n, unsigned tiles, unsigned* bad_tiles,
                          unsigned* blocks_seen) {
  __shared__ int tile[1024];
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    if (tiles != (n + blockDim.x - 1) / blockDim.x) atomicAdd(bad_tiles, 1u);
    if (blockDim.x % 32 == 0) atomicOr(blocks_seen, 1u << (blockDim.x / 32 - 1));
  }
  long long acc = 0;
  for (unsigned t = 0; t < tiles; ++t) {
    const unsigned j = t * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = j < n ? x[j] : 0;
    __syncthreads();
    for (unsigned k = 0; k < blockDim.x; ++k) acc += tile[k];
    __syncthreads();
  }
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = acc + i;
}

// Every block publishes its id, the grid syncs, every block reads the next one's: right only when the whole
// grid (any shape) co-resides and grid.sync() works.
__global__ void grid_exchange(int* slots, int* seen, unsigned* blocks) {
  cg::grid_group grid = cg::this_grid();
  const unsigned count = gridDim.x * gridDim.y * gridDim.z;
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0) slots[b] = int(b) + 1;
  grid.sync();
  if (threadIdx.x == 0) seen[b] = slots[(b + 1) % count];
  if (b == 0 && threadIdx.x == 0) *blocks = count;
}

// Grid-stride fill: out[i] = 3i + 1.
__global__ void stride_fill(unsigned* out, std::size_t n, unsigned* grid_x) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = unsigned(3 * i + 1);
  if (blockIdx.x == 0 && threadIdx.x == 0) *grid_x = gridDim.x;
}

// Grid-stride fill (out[i] = 3i + 1) that counts runs whose block is not a multiple of `multiple`.
__global__ void fill_checking_block(unsigned* out, std::size_t n, unsigned multiple, unsigned* outside_rule) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && blockDim.x % multiple != 0) atomicAdd(outside_rule, 1u);
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = unsigned(3 * i + 1);
}

// ---- host helpers ----------------------------------------------------------------------------------------

using launchfit_test::device_buffer;
using launchfit_test::load_autotune;

constexpr unsigned poison_u32 = 0xffffffffu;

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

std::vector<unsigned> random_values(std::size_t n, unsigned seed, unsigned lo, unsigned hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<unsigned> d(lo, hi);
  std::vector<unsigned> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

int device_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return sms;
}

// The launchfit::error `f` throws; a test failure (and an empty error) when it throws none.
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


class Shapes : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    sms_ = device_sms();
    ASSERT_GT(sms_, 0);
  }
  int sms_ = 0;
};

// The tree reduction's data: values 1..1000 (every dropped element changes the sum), per-block expected sums.
struct reduction_data {
  static constexpr unsigned n = 1'000'003;  // no multiple of any block size
  std::vector<unsigned> h = random_values(n, 7, 1, 1000);
  device_buffer<unsigned> in{n};
  device_buffer<unsigned> partial{n / 32 + 1};  // enough partials for any block of at least 32 threads
  device_buffer<unsigned> flags{2};
  std::uint64_t total = std::accumulate(h.begin(), h.end(), std::uint64_t{0});

  reduction_data() {
    in.upload(h);
    partial.poison();
    flags.zero();
  }
  // Blocks whose partial sum is not the sum of their `block` elements (`grid` blocks launched).
  std::size_t wrong_partials(unsigned grid, unsigned block, std::uint64_t* sum = nullptr) const {
    const auto p = partial.download();
    std::size_t wrong = 0;
    std::uint64_t s = 0;
    for (unsigned b = 0; b < grid && b < p.size(); ++b) {
      std::uint64_t expect = 0;
      for (std::size_t i = std::size_t(b) * block; i < std::min<std::size_t>(n, std::size_t(b + 1) * block);
           ++i)
        expect += h[i];
      wrong += p[b] != expect;
      s += p[b];
    }
    if (sum) *sum = s;
    return wrong;
  }
};

constexpr std::size_t reduce_smem = 32 * 1024;  // caps residency at a few blocks per SM (see below)

}  // namespace

// ---- 2-D and 3-D work ------------------------------------------------------------------------------------

TEST_F(Shapes, TransposeOf1000x777IsExactUnderMaxOccupancyFixed32x32AndAShaped1DBlock) {
  const unsigned nx = 1000, ny = 777;
  std::vector<float> h(std::size_t(nx) * ny);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(i);  // exact: below 2^24
  device_buffer<float> in(h.size()), out(h.size());
  device_buffer<unsigned> bad_shape(1);
  in.upload(h);

  auto check = [&](const lf::launched& l, const char* what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(l.block.x, 32u);
    ASSERT_LE(l.block.y, 32u);
    EXPECT_EQ(l.block.z, 1u);
    EXPECT_EQ(l.grid.x, (nx + 31) / 32);
    EXPECT_EQ(l.grid.y, (ny + l.block.y - 1) / l.block.y);
    EXPECT_EQ(l.grid.z, 1u);
    EXPECT_EQ(l.plan().block, l.block);
    EXPECT_EQ(l.plan().block_threads, static_cast<int>(l.block.count()));
    const auto o = out.download();
    std::size_t wrong = 0;
    for (unsigned x = 0; x < nx; ++x)
      for (unsigned y = 0; y < ny; ++y) wrong += o[std::size_t(x) * ny + y] != h[std::size_t(y) * nx + x];
    EXPECT_EQ(wrong, 0u) << "of " << o.size() << " elements, block " << l.block.to_string() << " grid "
                         << l.grid.to_string();
    EXPECT_EQ(bad_shape.download()[0], 0u);
  };

  bad_shape.zero();
  out.poison();
  const auto mo = lf::max_occupancy().items({nx, ny});
  const lf::launched a = lf::launch(transpose_tiled, mo, in.ptr, out.ptr, nx, ny, bad_shape.ptr);
  // The policy's 1-D choice shaped in rows of one warp.
  EXPECT_EQ(a.block.y, static_cast<unsigned>(a.plan().block_threads / 32));
  check(a, "max_occupancy");

  out.poison();
  const lf::launched b = lf::launch(transpose_tiled, lf::fixed(lf::dims{32, 32}).items({nx, ny}), in.ptr,
                                    out.ptr, nx, ny, bad_shape.ptr);
  EXPECT_EQ(b.block, (lf::dims{32, 32, 1}));
  EXPECT_EQ(b.grid, (lf::dims{32, 25, 1}));  // ceil(1000 / 32) x ceil(777 / 32)
  check(b, "fixed({32, 32})");

  out.poison();
  const lf::launched c =
      lf::launch(transpose_tiled, lf::fixed(256).items({nx, ny}), in.ptr, out.ptr, nx, ny, bad_shape.ptr);
  EXPECT_EQ(c.block, (lf::dims{32, 8, 1}));  // a 1-D block of 256 shaped as 32 x 8
  EXPECT_EQ(c.grid, (lf::dims{32, 98, 1}));  // ceil(777 / 8) = 98
  check(c, "fixed(256)");

  // A block that is not made of whole rows of 32 cannot run 2-D work: refused, nothing launched.
  out.poison();
  const lf::error e = error_from([&] {
    lf::launch(transpose_tiled, lf::fixed(48).items({nx, ny}), in.ptr, out.ptr, nx, ny, bad_shape.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_plan) << e.what();
  EXPECT_TRUE(contains(e.message(), "rows of 32")) << e.what();
  const auto untouched = out.download();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return std::isnan(v); }));
}

TEST_F(Shapes, ThreeDimensionalWorkCoversEveryElementOnce) {
  const unsigned nx = 70, ny = 33, nz = 45;
  const std::size_t count = std::size_t(nx) * ny * nz;
  device_buffer<unsigned> out(count), shape(6);
  auto check = [&](const lf::launched& l, lf::dims expect_grid) {
    SCOPED_TRACE(l.plan().to_string());
    EXPECT_EQ(l.grid, expect_grid);
    const auto s = shape.download();
    EXPECT_EQ((lf::dims{s[0], s[1], s[2]}), l.grid) << "the grid the GPU ran";
    EXPECT_EQ((lf::dims{s[3], s[4], s[5]}), l.block) << "the block the GPU ran";
    const auto o = out.download();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += o[i] != unsigned(i) + 1;
    EXPECT_EQ(wrong, 0u);
  };
  out.poison();
  shape.poison();
  const lf::launched a =
      lf::launch(index3d, lf::max_occupancy().items({nx, ny, nz}), out.ptr, nx, ny, nz, shape.ptr);
  ASSERT_EQ(a.block.x, 32u);
  EXPECT_EQ(a.block.z, 1u);
  check(a, lf::dims{3, (ny + a.block.y - 1) / a.block.y, nz});

  out.poison();
  shape.poison();
  const lf::launched b =
      lf::launch(index3d, lf::fixed(lf::dims{8, 8, 4}).items({nx, ny, nz}), out.ptr, nx, ny, nz, shape.ptr);
  EXPECT_EQ(b.block, (lf::dims{8, 8, 4}));
  check(b, lf::dims{9, 5, 12});  // ceil(70/8), ceil(33/8), ceil(45/4)
}

TEST_F(Shapes, GridYAndZAbove65535AreRefusedBeforeLaunchAndTheLimitItselfRuns) {
  const unsigned nx = 32;
  device_buffer<unsigned> out(std::size_t(nx) * 65536), shape(6);
  // Exactly 65535 blocks in y: runs, every element written.
  out.poison();
  const lf::launched ok =
      lf::launch(index3d, lf::fixed(lf::dims{32, 1}).items({nx, 65535}), out.ptr, nx, 65535u, 1u, shape.ptr);
  EXPECT_EQ(ok.grid, (lf::dims{1, 65535, 1}));
  auto o = out.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < std::size_t(nx) * 65535; ++i) wrong += o[i] != unsigned(i) + 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(o[std::size_t(nx) * 65535], poison_u32) << "written past the work";

  // 65536 rows of one block each: refused with the numbers, nothing written.
  out.poison();
  lf::error e = error_from([&] {
    lf::launch(index3d, lf::fixed(lf::dims{32, 1}).items({nx, 65536}), out.ptr, nx, 65536u, 1u, shape.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_argument) << e.what();
  EXPECT_TRUE(contains(e.message(), "65536")) << e.what();
  EXPECT_TRUE(contains(e.message(), "65535")) << e.what();
  // The same in z.
  e = error_from([&] {
    lf::launch(index3d, lf::fixed(lf::dims{32, 1, 1}).items({nx, 1, 65536}), out.ptr, nx, 1u, 65536u,
               shape.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_argument) << e.what();
  o = out.download();
  EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](unsigned v) { return v == poison_u32; }))
      << "a refused launch ran";
}

// ---- block rules -----------------------------------------------------------------------------------------

TEST_F(Shapes, TreeReductionIsWrongWithABlockOf224) {
  reduction_data d;
  const lf::launched l = lf::launch(tree_reduce, lf::fixed(224).items(d.n).smem(reduce_smem), d.in.ptr,
                                    d.partial.ptr, d.n, d.flags.ptr);
  ASSERT_EQ(l.block.x, 224u);
  ASSERT_EQ(l.grid.x, (d.n + 223) / 224);
  std::uint64_t sum = 0;
  const std::size_t wrong = d.wrong_partials(l.grid.x, 224, &sum);
  // The checker can fail: every block of 224 drops elements, so the sum is short.
  EXPECT_EQ(wrong, l.grid.x) << "blocks with a wrong partial sum";
  EXPECT_LT(sum, d.total);
  EXPECT_EQ(d.flags.download()[0], 1u);
}

TEST_F(Shapes, PowerOfTwoRuleGivesRightSumsUnderMaxOccupancyAndBytesInFlight) {
  reduction_data d;
  // Without the rule both policies choose 224 here: 32 KB of smem per block caps every size at the same few
  // blocks per SM, so max_occupancy(largest, up to 224) takes 224, and bytes_in_flight's 7-warp target is
  // met exactly by one block of 224.
  const auto mo = lf::max_occupancy(0, 224).items(d.n).smem(reduce_smem);
  const auto bif = lf::bytes_in_flight(16, 7 * 32 * 16, 224).items(d.n).smem(reduce_smem);
  EXPECT_EQ(lf::plan_for(tree_reduce, mo).block_threads, 224) << lf::plan_for(tree_reduce, mo).reason;
  EXPECT_EQ(lf::plan_for(tree_reduce, bif).block_threads, 224) << lf::plan_for(tree_reduce, bif).reason;

  const auto pow2 = lf::block_rule::power_of_two();
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "max_occupancy" : "bytes_in_flight");
    d.partial.poison();
    d.flags.zero();
    const lf::launched l =
        which == 0
            ? lf::launch(tree_reduce, lf::max_occupancy(0, 224).items(d.n).smem(reduce_smem).blocks(pow2),
                         d.in.ptr, d.partial.ptr, d.n, d.flags.ptr)
            : lf::launch(tree_reduce,
                         lf::bytes_in_flight(16, 7 * 32 * 16, 224).items(d.n).smem(reduce_smem).blocks(pow2),
                         d.in.ptr, d.partial.ptr, d.n, d.flags.ptr);
    const lf::plan& p = l.plan();
    EXPECT_TRUE(is_power_of_two(p.block_threads)) << p.to_string();
    EXPECT_EQ(p.blocks, "power of two");
    const lf::plan& without_rule =
        which == 0 ? lf::plan_for(tree_reduce, mo) : lf::plan_for(tree_reduce, bif);
    EXPECT_NE(&p, &without_rule) << "the rule is part of the plan key";
    EXPECT_EQ(without_rule.block_threads, 224);
    ASSERT_EQ(l.grid.x, (d.n + p.block_threads - 1) / p.block_threads);
    std::uint64_t sum = 0;
    EXPECT_EQ(d.wrong_partials(l.grid.x, static_cast<unsigned>(p.block_threads), &sum), 0u);
    EXPECT_EQ(sum, d.total);
    EXPECT_EQ(d.flags.download()[0], 0u) << "a launch ran with a block that is not a power of two";
  }
}

TEST_F(Shapes, PowerOfTwoRuleGivesRightSumsUnderAutotuneTrialsIncluded) {
  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  reduction_data d;
  // Trials re-run the kernel: it only overwrites its partials, so re-running is harmless. The flag counts
  // every run (trials too) with a block the rule forbids.
  const auto spec = lf::use("autotune(max_trials=24)")
                        .items(d.n)
                        .smem(reduce_smem)
                        .blocks(lf::block_rule::power_of_two())
                        .rerunnable();
  const lf::launched l = lf::launch(tree_reduce, spec, d.in.ptr, d.partial.ptr, d.n, d.flags.ptr);
  const lf::plan& p = l.plan();
  std::printf("autotune with a power-of-two rule: %s trials=%d\n  reason: %s\n", p.to_string().c_str(),
              p.trials, p.reason.c_str());
  EXPECT_GT(p.trials, 1) << "autotune timed nothing: the rule was not tested against trials";
  EXPECT_TRUE(is_power_of_two(p.block_threads)) << p.to_string();
  EXPECT_EQ(p.blocks, "power of two");
  std::uint64_t sum = 0;
  EXPECT_EQ(d.wrong_partials(l.grid.x, static_cast<unsigned>(p.block_threads), &sum), 0u);
  EXPECT_EQ(sum, d.total);
  EXPECT_EQ(d.flags.download()[0], 0u) << "a trial or the launch ran with a block that is not a power of two";
}

// A rule that none of autotune's usual sizes (the max-occupancy block, 64 ... 1024) meets: the plugin must be
// offered only allowed sizes (the query's oracle answers 0 for the others), or it times nothing that can run.
TEST_F(Shapes, AutotuneChoosesAmongMultiplesOf96Only) {
  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  const std::size_t n = 3'000'017;
  device_buffer<unsigned> out(n + 1), outside_rule(1);
  out.poison();
  outside_rule.zero();
  const lf::launched l = lf::launch(
      fill_checking_block,
      lf::use("autotune(max_trials=24)").items(n).blocks(lf::block_rule::multiple_of(96)).rerunnable(),
      out.ptr, n, 96u, outside_rule.ptr);
  const lf::plan& p = l.plan();
  std::printf("autotune with multiple_of(96): %s trials=%d\n  reason: %s\n", p.to_string().c_str(), p.trials,
              p.reason.c_str());
  EXPECT_EQ(p.block_threads % 96, 0) << p.to_string();
  EXPECT_EQ(p.blocks, "multiple of 96");
  EXPECT_GT(p.trials, 1);
  EXPECT_EQ(outside_rule.download()[0], 0u) << "a trial ran with a block outside the rule";
  const auto o = out.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += o[i] != unsigned(3 * i + 1);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(o[n], poison_u32);
}

TEST_F(Shapes, FixedBlockOutsideTheRuleIsRefusedAndTheOutputUntouched) {
  reduction_data d;
  const lf::error e = error_from([&] {
    lf::launch(tree_reduce,
               lf::fixed(224).items(d.n).smem(reduce_smem).blocks(lf::block_rule::power_of_two()), d.in.ptr,
               d.partial.ptr, d.n, d.flags.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_plan) << e.what();
  EXPECT_EQ(e.call(), "validate(block)") << e.what();
  EXPECT_TRUE(contains(e.message(), "224")) << e.what();
  EXPECT_TRUE(contains(e.message(), "power of two")) << e.what();
  EXPECT_TRUE(contains(e.kernel(), "tree_reduce")) << e.what();
  const auto p = d.partial.download();
  EXPECT_TRUE(std::all_of(p.begin(), p.end(), [](unsigned v) { return v == poison_u32; }))
      << "a refused launch ran";
  EXPECT_EQ(d.flags.download()[0], 0u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- kernel families -------------------------------------------------------------------------------------

using reduce_signature = void(const unsigned*, unsigned*, unsigned, unsigned*);

const lf::family<reduce_signature>& reduce_family() {
  static const auto& f = *new lf::family<reduce_signature>{{64, reduce_member<64>},
                                                           {128, reduce_member<128>},
                                                           {256, reduce_member<256>},
                                                           {512, reduce_member<512>}};
  return f;
}

TEST_F(Shapes, FamilyPicksAMemberWhoseBlockItIsAndSumsRight) {
  reduction_data d;
  device_buffer<unsigned> member(2);
  const auto spec = lf::max_occupancy().items(d.n);
  // The single kernel reduce_member<64> can only run blocks of 64 (its launch bounds).
  const lf::plan& single = lf::plan_for(reduce_member<64>, spec);
  EXPECT_EQ(single.block_threads, 64);

  member.zero();
  const lf::launched l = lf::launch(reduce_family(), spec, d.in.ptr, d.partial.ptr, d.n, member.ptr);
  const lf::plan& p = l.plan();
  std::printf("family: %s\n  reason: %s\n", p.to_string().c_str(), p.reason.c_str());
  EXPECT_TRUE(p.block_threads == 64 || p.block_threads == 128 || p.block_threads == 256 ||
              p.block_threads == 512)
      << p.to_string();
  EXPECT_EQ(l.block.x, static_cast<unsigned>(p.block_threads));
  EXPECT_TRUE(contains(p.reason, "family")) << p.reason;
  // The family's plan is its own: not reduce_member<64>'s (planned first, same spec), nor its member's.
  EXPECT_NE(&p, &single);
  EXPECT_EQ(&lf::plan_for(reduce_family(), spec), &p);
  EXPECT_NE(p.block_threads, 64)
      << "every member reaches full occupancy: the block nearest 256 wins, not the "
         "single kernel's 64";
  const auto m = member.download();
  EXPECT_EQ(m[0], static_cast<unsigned>(p.block_threads)) << "the member launched is not the plan's block's";
  EXPECT_EQ(m[1], 0u) << "a member ran with a block it is not written for";
  std::uint64_t sum = 0;
  EXPECT_EQ(d.wrong_partials(l.grid.x, static_cast<unsigned>(p.block_threads), &sum), 0u);
  EXPECT_EQ(sum, d.total);

  // The same launch with the arguments as an aggregate's fields (lf::args): the same plan and member, as right.
  struct reduce_fields {
    const unsigned* in;
    unsigned* partial;
    unsigned n;
    unsigned* member;
  };
  member.zero();
  d.partial.poison();
  const lf::launched packed = lf::launch(reduce_family(), spec, lf::args(reduce_fields{d.in.ptr, d.partial.ptr, d.n, member.ptr}));
  EXPECT_EQ(&packed.plan(), &p);
  EXPECT_EQ(member.download()[0], static_cast<unsigned>(p.block_threads));
  EXPECT_EQ(d.wrong_partials(packed.grid.x, static_cast<unsigned>(p.block_threads), &sum), 0u);
  EXPECT_EQ(sum, d.total);

  // A single member planned after the family has its own plan too.
  const lf::plan& single256 = lf::plan_for(reduce_member<256>, spec);
  EXPECT_NE(&single256, &p);

  // A block rule chooses among the members; one no member meets is refused before launching.
  member.zero();
  d.partial.poison();
  const lf::launched r =
      lf::launch(reduce_family(), lf::max_occupancy().items(d.n).blocks(lf::block_rule::one_of({128})),
                 d.in.ptr, d.partial.ptr, d.n, member.ptr);
  EXPECT_EQ(r.plan().block_threads, 128);
  EXPECT_EQ(member.download()[0], 128u);
  EXPECT_EQ(d.wrong_partials(r.grid.x, 128, &sum), 0u);
  EXPECT_EQ(sum, d.total);

  member.zero();
  d.partial.poison();
  const lf::error e = error_from([&] {
    lf::launch(reduce_family(), lf::max_occupancy().items(d.n).blocks(lf::block_rule::one_of({96, 1024})),
               d.in.ptr, d.partial.ptr, d.n, member.ptr);
  });
  EXPECT_EQ(e.code(), lf::errc::invalid_policy) << e.what();
  const auto untouched = d.partial.download();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](unsigned v) { return v == poison_u32; }));
  EXPECT_EQ(member.download()[0], 0u);
}

TEST_F(Shapes, FamilyUnderAutotuneTimesEachCandidateWithItsOwnMember) {
  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  reduction_data d;
  device_buffer<unsigned> member(2);
  member.zero();
  const auto spec = lf::use("autotune(max_trials=16)").items(d.n).rerunnable();
  const lf::launched l = lf::launch(reduce_family(), spec, d.in.ptr, d.partial.ptr, d.n, member.ptr);
  const lf::plan& p = l.plan();
  std::printf("family under autotune: %s trials=%d\n", p.to_string().c_str(), p.trials);
  EXPECT_GT(p.trials, 1);
  EXPECT_TRUE(p.block_threads == 64 || p.block_threads == 128 || p.block_threads == 256 ||
              p.block_threads == 512);
  const auto m = member.download();
  EXPECT_EQ(m[1], 0u) << "a trial ran a member with a block it is not written for";
  EXPECT_EQ(m[0], static_cast<unsigned>(p.block_threads));
  std::uint64_t sum = 0;
  EXPECT_EQ(d.wrong_partials(l.grid.x, static_cast<unsigned>(p.block_threads), &sum), 0u);
  EXPECT_EQ(sum, d.total);
}

// ---- what launch() returns -------------------------------------------------------------------------------

TEST_F(Shapes, LaunchedIsWhatRanAndEqualsGridForOfPlanFor) {
  device_buffer<unsigned> shape(6);
  auto check = [&](const auto& spec, const char* what) {
    SCOPED_TRACE(what);
    shape.poison();
    const lf::launched l = lf::launch(probe_shape, spec, shape.ptr);
    const lf::plan& p = lf::plan_for(probe_shape, spec);
    EXPECT_EQ(&l.plan(), &p);
    EXPECT_EQ(l.grid, lf::grid_for(p, spec.work_shape()));
    EXPECT_EQ(l.block, p.block);
    EXPECT_EQ(l.dynamic_smem_bytes, p.dynamic_smem_bytes);
    EXPECT_DOUBLE_EQ(l.waves(), p.waves(l.grid));
    const auto s = shape.download();
    EXPECT_EQ((lf::dims{s[0], s[1], s[2]}), l.grid) << "the grid the GPU ran";
    EXPECT_EQ((lf::dims{s[3], s[4], s[5]}), l.block) << "the block the GPU ran";
  };
  const std::uint64_t n = 12'345'679;
  check(lf::max_occupancy().items(n), "items");
  check(lf::max_occupancy().items(n).per_thread(3), "items per_thread(3)");
  check(lf::max_occupancy().items({1000, 777}), "items 2-D");
  check(lf::fixed(lf::dims{32, 32}).items({1000, 777}), "fixed 32x32");
  check(lf::bytes_in_flight(16).grid_stride(n), "bytes_in_flight grid_stride");
  check(lf::max_occupancy().grid_stride(n).waves(3), "grid_stride waves(3)");
  check(lf::max_occupancy(0), "no work: one wave");
  check(lf::max_occupancy(0).sms(7), "no work on 7 SMs");
  check(lf::cooperative(), "cooperative");
  check(lf::fixed(128, 77), "fixed grid");
  check(lf::max_occupancy().smem(1000).items(n), "dynamic smem");
  // Nothing to do: a zero grid, nothing launched, the plan still returned.
  const lf::launched none = lf::launch(probe_shape, lf::max_occupancy().items(0), shape.ptr);
  EXPECT_EQ(none.grid.count(), 0u);
  EXPECT_EQ(&none.plan(), &lf::plan_for(probe_shape, lf::max_occupancy().items(0)));
}

// ---- from_plan() arguments -------------------------------------------------------------------------------

struct tiled_sum_data {
  static constexpr unsigned n = 20'011;
  std::vector<int> h;
  device_buffer<int> x{n};
  device_buffer<long long> out{n};
  device_buffer<unsigned> flags{2};  // bad tile counts, block sizes seen
  long long total = 0;
  tiled_sum_data() {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> d(-1000, 1000);
    h.resize(n);
    for (int& v : h) v = d(rng);
    total = std::accumulate(h.begin(), h.end(), 0LL);
    x.upload(h);
    out.poison();
    flags.zero();
  }
  std::size_t wrong() const {
    const auto o = out.download();
    std::size_t bad = 0;
    for (unsigned i = 0; i < n; ++i) bad += o[i] != total + i;
    return bad;
  }
};

auto tiles_of(unsigned n) {
  return lf::from_plan(
      [n](const lf::plan& p) { return (n + unsigned(p.block_threads) - 1) / unsigned(p.block_threads); });
}

TEST_F(Shapes, FromPlanArgumentIsComputedForTheBlockLaunched) {
  for (int prefer : {256, 96, 0}) {
    SCOPED_TRACE("prefer_block " + std::to_string(prefer));
    tiled_sum_data d;
    const lf::launched l = lf::launch(tiled_sum, lf::max_occupancy(prefer).items(d.n), d.x.ptr, d.out.ptr,
                                      d.n, tiles_of(d.n), d.flags.ptr, d.flags.ptr + 1);
    EXPECT_EQ(d.wrong(), 0u) << l.plan().to_string();
    const auto f = d.flags.download();
    EXPECT_EQ(f[0], 0u) << "the kernel got a tile count for another block";
    EXPECT_EQ(f[1], 1u << (l.plan().block_threads / 32 - 1));
  }
}

TEST_F(Shapes, FromPlanArgumentIsComputedForEveryAutotuneTrial) {
  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  tiled_sum_data d;
  const lf::launched l = lf::launch(tiled_sum, lf::use("autotune(max_trials=20)").items(d.n).rerunnable(),
                                    d.x.ptr, d.out.ptr, d.n, tiles_of(d.n), d.flags.ptr, d.flags.ptr + 1);
  const lf::plan& p = l.plan();
  const auto f = d.flags.download();
  const int sizes_run = __builtin_popcount(f[1]);
  std::printf("from_plan under autotune: %s trials=%d, %d block sizes ran\n", p.to_string().c_str(), p.trials,
              sizes_run);
  EXPECT_GT(p.trials, 1);
  EXPECT_GT(sizes_run, 1) << "trials ran one block size only: the per-trial argument was not exercised";
  EXPECT_EQ(f[0], 0u) << "a trial (or the launch) got a tile count for another block";
  EXPECT_EQ(d.wrong(), 0u);
}

// ---- caller grids, SM budgets, waves ---------------------------------------------------------------------

TEST_F(Shapes, CooperativeCallerGridRunsWithinCoResidencyAndIsRefusedBeyond) {
  const lf::plan& p = lf::plan_for(grid_exchange, lf::cooperative());
  int per_sm = 0;
  LF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_exchange, p.block_threads, 0));
  const long long resident = static_cast<long long>(per_sm) * sms_;
  ASSERT_EQ(p.resident_blocks(), resident);
  // max_occupancy's block, made cooperative by the spec.
  const lf::plan& mp = lf::plan_for(grid_exchange, lf::max_occupancy(0).cooperative());
  EXPECT_TRUE(mp.options.cooperative);
  const unsigned mr = static_cast<unsigned>(mp.resident_blocks());
  ASSERT_GT(mr, 0u);
  const std::size_t slots_needed = static_cast<std::size_t>(std::max<long long>(resident, mr)) + 2;
  device_buffer<int> slots(slots_needed), seen(slots_needed);
  device_buffer<unsigned> blocks(1);

  auto run = [&](const auto& spec, lf::dims g) {
    SCOPED_TRACE("grid " + g.to_string());
    seen.poison();
    blocks.poison();
    const lf::launched l = lf::launch(grid_exchange, spec, slots.ptr, seen.ptr, blocks.ptr);
    EXPECT_EQ(l.grid, g);
    EXPECT_TRUE(l.plan().options.cooperative);
    const unsigned count = static_cast<unsigned>(g.count());
    EXPECT_EQ(blocks.download()[0], count);
    const auto h = seen.download();
    std::size_t wrong = 0;
    for (unsigned b = 0; b < count; ++b) wrong += h[b] != int((b + 1) % count) + 1;
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(h[count], -1) << "a block beyond the grid ran";
  };
  const unsigned r = static_cast<unsigned>(resident);
  for (lf::dims g : {lf::dims{1, 1, 1}, lf::dims{7, 1, 1}, lf::dims{r - 1, 1, 1}, lf::dims{r, 1, 1},
                     lf::dims{r / 2, 2, 1}}) {
    run(lf::cooperative().grid(g), g);
  }
  run(lf::max_occupancy(0).cooperative().grid({mr, 1, 1}), lf::dims{mr, 1, 1});
  run(lf::max_occupancy(0).cooperative(), lf::dims{mr, 1, 1});  // no work: exactly one co-resident wave

  // One block beyond co-residency: refused with both numbers, nothing launched, the context healthy.
  for (lf::dims g : {lf::dims{r + 1, 1, 1}, lf::dims{r / 2 + 1, 2, 1}}) {
    SCOPED_TRACE("grid " + g.to_string());
    seen.poison();
    const lf::error e = error_from(
        [&] { lf::launch(grid_exchange, lf::cooperative().grid(g), slots.ptr, seen.ptr, blocks.ptr); });
    EXPECT_EQ(e.code(), lf::errc::cooperative_too_large) << e.what();
    EXPECT_NE(e.call(), "cuLaunchKernelEx") << "refused by the driver, not before launching: " << e.what();
    EXPECT_TRUE(contains(e.message(), std::to_string(g.count()))) << e.what();
    EXPECT_TRUE(contains(e.message(), std::to_string(resident))) << e.what();
    const auto h = seen.download();
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](int v) { return v == -1; })) << "a refused launch ran";
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Shapes, SmBudgetSizesTheCooperativeGridAndGridStrideWaves) {
  const int k = std::min(10, sms_);
  const auto spec = lf::cooperative().sms(k);
  const lf::plan& p = lf::plan_for(grid_exchange, spec);
  EXPECT_EQ(p.sm_count, k);
  int per_sm = 0;
  LF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_exchange, p.block_threads, 0));
  EXPECT_EQ(p.blocks_per_sm, per_sm);
  const unsigned expect = static_cast<unsigned>(per_sm * k);
  device_buffer<int> slots(expect), seen(expect);
  device_buffer<unsigned> blocks(1);
  seen.poison();
  const lf::launched l = lf::launch(grid_exchange, spec, slots.ptr, seen.ptr, blocks.ptr);
  EXPECT_EQ(l.grid, (lf::dims{expect, 1, 1}));
  EXPECT_EQ(blocks.download()[0], expect);
  const auto h = seen.download();
  for (unsigned b = 0; b < expect; ++b) ASSERT_EQ(h[b], int((b + 1) % expect) + 1) << b;
  EXPECT_DOUBLE_EQ(l.waves(), 1.0);
  // A budget above the device's SMs is the device's.
  EXPECT_EQ(lf::plan_for(grid_exchange, lf::cooperative().sms(100000)).sm_count, sms_);

  // grid_stride(n).waves(2): capped at two waves of resident blocks, every element written once.
  const std::size_t n = 20'000'003;
  device_buffer<unsigned> out(n + 1), grid_x(1);
  out.poison();
  const lf::launched w =
      lf::launch(stride_fill, lf::max_occupancy().grid_stride(n).waves(2), out.ptr, n, grid_x.ptr);
  const lf::plan& wp = w.plan();
  ASSERT_LT(2 * wp.resident_blocks(), static_cast<long long>((n + wp.block_threads - 1) / wp.block_threads))
      << "n too small to reach the cap";
  EXPECT_EQ(w.grid.x, static_cast<unsigned>(2 * wp.resident_blocks()));
  EXPECT_EQ(wp.resident_blocks(), static_cast<long long>(wp.blocks_per_sm) * sms_);
  EXPECT_DOUBLE_EQ(w.waves(), 2.0);
  EXPECT_EQ(grid_x.download()[0], w.grid.x);
  auto o = out.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += o[i] != unsigned(3 * i + 1);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(o[n], poison_u32);

  // On an SM budget: two waves of k SMs.
  out.poison();
  const lf::launched wk =
      lf::launch(stride_fill, lf::max_occupancy().grid_stride(n).waves(2).sms(k), out.ptr, n, grid_x.ptr);
  EXPECT_EQ(wk.plan().sm_count, k);
  EXPECT_EQ(wk.grid.x, static_cast<unsigned>(2 * wk.plan().blocks_per_sm * k));
  EXPECT_DOUBLE_EQ(wk.waves(), 2.0);
  o = out.download();
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += o[i] != unsigned(3 * i + 1);
  EXPECT_EQ(wrong, 0u);

  // Few items: the grid is what the items need, below the cap.
  out.poison();
  const std::size_t few = 1000;
  const lf::launched f =
      lf::launch(stride_fill, lf::max_occupancy().grid_stride(few).waves(2), out.ptr, few, grid_x.ptr);
  EXPECT_EQ(f.grid.x, static_cast<unsigned>((few + f.plan().block_threads - 1) / f.plan().block_threads));
  o = out.download();
  for (std::size_t i = 0; i < few; ++i) ASSERT_EQ(o[i], unsigned(3 * i + 1)) << i;
  EXPECT_EQ(o[few], poison_u32);
}

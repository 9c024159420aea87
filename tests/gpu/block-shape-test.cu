// SPDX-License-Identifier: MIT
// Block shapes on a real GPU: kernels that index more than x. A quasirandom generator that reads its
// dimension from threadIdx.y (block {bx, 3}), the cuda-samples tiled transpose (a 32x32 tile, block 32x8, 4
// rows per thread) and a transpose whose tile width is the block's x (a multiple of 32 the policy chooses).
// Each is launched through launchfit under several policies and checked element by element against the CPU,
// with outputs poisoned before the launch and a flag set by any block of another shape (autotune trials too).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"
#include "test_doubles.hpp"

namespace lf = launchfit;
using launchfit_test::device_buffer;
using launchfit_test::load_autotune;

namespace {

// ---- kernels ---------------------------------------------------------------------------------------------

constexpr int qrng_dimensions = 3;
constexpr int qrng_bits = 31;
__constant__ unsigned qrng_table[qrng_dimensions][qrng_bits];

// cuda-samples' quasirandomGenerator kernel: dimension threadIdx.y, points along x in a grid-stride loop;
// out[d * n + i] is point i of dimension d (direction numbers XORed for the set bits of seed + i).
__global__ void quasirandom(unsigned* out, unsigned seed, unsigned n, unsigned* bad_shape) {
  if (blockDim.y != qrng_dimensions || blockDim.z != 1 || gridDim.y != 1 || blockDim.x % 32 != 0) {
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(bad_shape, 1u);
    return;
  }
  const unsigned* dim = qrng_table[threadIdx.y];
  const unsigned stride = blockDim.x * gridDim.x;
  for (unsigned pos = blockIdx.x * blockDim.x + threadIdx.x; pos < n; pos += stride) {
    unsigned result = 0;
    unsigned data = seed + pos;
    for (int bit = 0; bit < qrng_bits; ++bit, data >>= 1)
      if (data & 1) result ^= dim[bit];
    out[std::size_t(threadIdx.y) * n + pos] = result;
  }
}

// cuda-samples' transposeCoalesced: an ny x nx row-major matrix into nx x ny, a 32x32 tile per block of 32x8
// threads, each thread covering 4 rows. The grid must be one block per tile: ceil(nx / 32) x ceil(ny / 32).
constexpr unsigned tile = 32, block_rows = 8;
__global__ void __launch_bounds__(256)
    transpose_rows(const float* in, float* out, unsigned nx, unsigned ny, unsigned* bad_shape) {
  __shared__ float t[tile][tile + 1];
  if (blockDim.x != tile || blockDim.y != block_rows || blockDim.z != 1) {
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(bad_shape, 1u);
    return;
  }
  unsigned x = blockIdx.x * tile + threadIdx.x, y = blockIdx.y * tile + threadIdx.y;
  for (unsigned j = 0; j < tile; j += block_rows)
    if (x < nx && y + j < ny) t[threadIdx.y + j][threadIdx.x] = in[std::size_t(y + j) * nx + x];
  __syncthreads();
  x = blockIdx.y * tile + threadIdx.x;  // the transposed tile's origin
  y = blockIdx.x * tile + threadIdx.y;
  for (unsigned j = 0; j < tile; j += block_rows)
    if (x < ny && y + j < nx) out[std::size_t(y + j) * ny + x] = t[threadIdx.x][threadIdx.y + j];
}

// The same transpose with a tile as wide as the block's x (a multiple of 32) and 32 rows tall: 8 rows of
// threads, 4 rows each. Shared memory 32 x (blockDim.x + 1) floats, from an smem_per_block rule.
__global__ void transpose_wide(const float* in, float* out, unsigned nx, unsigned ny, unsigned* bad_shape) {
  extern __shared__ float t[];
  const unsigned w = blockDim.x, pitch = w + 1;
  if (w % 32 != 0 || blockDim.y != block_rows || blockDim.z != 1) {
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(bad_shape, 1u);
    return;
  }
  const unsigned x0 = blockIdx.x * w, y0 = blockIdx.y * tile;
  for (unsigned j = threadIdx.y; j < tile; j += block_rows) {
    const unsigned x = x0 + threadIdx.x, y = y0 + j;
    if (x < nx && y < ny) t[j * pitch + threadIdx.x] = in[std::size_t(y) * nx + x];
  }
  __syncthreads();
  // The output tile is w rows (input columns) by 32 columns (input rows): a warp writes 32 consecutive
  // columns.
  const unsigned id = threadIdx.y * w + threadIdx.x;
  for (unsigned r = id / tile; r < w; r += w * block_rows / tile) {
    const unsigned c = id % tile, ox = x0 + r, oy = y0 + c;
    if (ox < nx && oy < ny) out[std::size_t(ox) * ny + oy] = t[c * pitch + r];
  }
}

// ---- the CPU's answers
// -------------------------------------------------------------------------------------

// Direction numbers: dimension 0 is van der Corput's; the others are odd multipliers of it, fixed by a seed.
std::vector<unsigned> qrng_directions() {
  std::vector<unsigned> table(qrng_dimensions * qrng_bits);
  std::uint32_t state = 12345;
  for (int d = 0; d < qrng_dimensions; ++d) {
    for (int bit = 0; bit < qrng_bits; ++bit) {
      state = state * 1664525u + 1013904223u;
      table[d * qrng_bits + bit] = d == 0 ? 1u << (qrng_bits - bit) : (state | 1u) >> (bit % 7);
    }
  }
  return table;
}

std::vector<unsigned> qrng_on_cpu(const std::vector<unsigned>& table, unsigned seed, unsigned n) {
  std::vector<unsigned> out(std::size_t(qrng_dimensions) * n);
  for (int d = 0; d < qrng_dimensions; ++d) {
    for (unsigned pos = 0; pos < n; ++pos) {
      unsigned result = 0, data = seed + pos;
      for (int bit = 0; bit < qrng_bits; ++bit, data >>= 1)
        if (data & 1) result ^= table[d * qrng_bits + bit];
      out[std::size_t(d) * n + pos] = result;
    }
  }
  return out;
}

std::vector<float> transpose_on_cpu(const std::vector<float>& in, unsigned nx, unsigned ny) {
  std::vector<float> out(in.size());
  for (unsigned y = 0; y < ny; ++y)
    for (unsigned x = 0; x < nx; ++x) out[std::size_t(x) * ny + y] = in[std::size_t(y) * nx + x];
  return out;
}

std::size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += !(a[i] == b[i]);
  return wrong;
}

class BlockShape : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

}  // namespace

// ---- a y the kernel fixes
// ------------------------------------------------------------------------------------

TEST_F(BlockShape, QuasirandomGeneratorRunsWithBlockY3UnderEveryPolicy) {
  const std::vector<unsigned> table = qrng_directions();
  ASSERT_EQ(cudaMemcpyToSymbol(qrng_table, table.data(), table.size() * sizeof(unsigned)), cudaSuccess);
  const unsigned n = 1'000'003, seed = 17;
  const std::vector<unsigned> expect = qrng_on_cpu(table, seed, n);
  device_buffer<unsigned> out(expect.size()), bad_shape(1);

  auto check = [&](const lf::launched& l, const char* what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::printf("%s: %s grid=%s\n", what, l.plan().to_string().c_str(), l.grid.to_string().c_str());
    EXPECT_EQ(l.block.y, 3u);
    EXPECT_EQ(l.block.x % 32, 0u);
    EXPECT_EQ(l.grid.y, 1u);
    EXPECT_EQ(l.plan().shape_rule.y, 3u);
    EXPECT_NE(l.plan().to_string().find("shape=x=32n,y=3"), std::string::npos) << l.plan().to_string();
    EXPECT_EQ(bad_shape.download()[0], 0u) << "a launch or a trial ran with a block of another shape";
    const auto o = out.download();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < o.size(); ++i) wrong += o[i] != expect[i];
    EXPECT_EQ(wrong, 0u) << "of " << o.size();
  };

  const std::pair<const char*, lf::launched (*)(unsigned*, unsigned, unsigned, unsigned*)> launches[] = {
      {"max_occupancy grid_stride(n)",
       [](unsigned* o, unsigned s, unsigned m, unsigned* b) {
         return lf::launch(quasirandom, lf::max_occupancy().grid_stride(m).block_y(3), o, s, m, b);
       }},
      {"max_occupancy(0) items({n, 3})",
       [](unsigned* o, unsigned s, unsigned m, unsigned* b) {
         return lf::launch(quasirandom, lf::max_occupancy(0).items({m, 3u}).block_y(3), o, s, m, b);
       }},
      {"bytes_in_flight(4) items(n)",
       [](unsigned* o, unsigned s, unsigned m, unsigned* b) {
         return lf::launch(quasirandom, lf::bytes_in_flight(4).items(m).block_y(3), o, s, m, b);
       }},
      {"fixed(192) grid_stride(n)",
       [](unsigned* o, unsigned s, unsigned m, unsigned* b) {
         return lf::launch(quasirandom, lf::fixed(192).grid_stride(m).block_y(3), o, s, m, b);
       }},
      {"cooperative()",
       [](unsigned* o, unsigned s, unsigned m, unsigned* b) {
         return lf::launch(quasirandom, lf::cooperative().block_y(3), o, s, m, b);
       }},
  };
  for (const auto& [what, run] : launches) {
    out.poison();
    bad_shape.zero();
    const lf::launched l = run(out.ptr, seed, n, bad_shape.ptr);
    check(l, what);
    if (std::string(what).rfind("fixed", 0) == 0) EXPECT_EQ(l.block, (lf::dims{64, 3, 1}));
    if (std::string(what).find("items") != std::string::npos)
      EXPECT_EQ(l.grid.x, (n + l.block.x - 1) / l.block.x);  // one thread per point along x
  }

  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  out.poison();
  bad_shape.zero();
  const lf::launched tuned =
      lf::launch(quasirandom, lf::use("autotune(max_trials=16)").items(n).block_y(3).rerunnable(), out.ptr,
                 seed, n, bad_shape.ptr);
  EXPECT_GT(tuned.plan().trials, 1);
  check(tuned, "autotune items(n)");
}

// ---- rows per thread
// -----------------------------------------------------------------------------------------

TEST_F(BlockShape, TiledTransposeOf1000x777Is32x8BlocksWith4RowsPerThreadUnderEveryPolicy) {
  const unsigned nx = 1000, ny = 777;  // no multiple of the tile in either dimension
  std::vector<float> h(std::size_t(nx) * ny);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(i);  // exact: below 2^24
  const std::vector<float> expect = transpose_on_cpu(h, nx, ny);
  device_buffer<float> in(h.size()), out(h.size());
  device_buffer<unsigned> bad_shape(1);
  in.upload(h);

  for (const char* policy : {"max_occupancy", "max_occupancy(prefer_block=0)",
                             "bytes_in_flight(per_thread=8)", "fixed(block=256)"}) {
    SCOPED_TRACE(policy);
    out.poison();
    bad_shape.zero();
    const lf::launched l =
        lf::launch(transpose_rows, lf::use(policy).items({nx, ny}).block_y(8).per_thread_y(4), in.ptr,
                   out.ptr, nx, ny, bad_shape.ptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(l.block, (lf::dims{32, 8, 1}));
    EXPECT_EQ(l.grid, (lf::dims{32, 25, 1}));  // ceil(1000 / 32) x ceil(777 / (8 x 4)): one block per tile
    EXPECT_EQ(l.plan().shape_rule.per_thread_y, 4u);
    EXPECT_EQ(bad_shape.download()[0], 0u);
    EXPECT_EQ(mismatches(out.download(), expect), 0u)
        << "block " << l.block.to_string() << " grid " << l.grid.to_string();
  }
  // The plan launched verbatim keeps its rows per thread: the same grid.
  const lf::plan& p =
      lf::plan_for(transpose_rows, lf::max_occupancy(0).items({nx, ny}).block_y(8).per_thread_y(4));
  out.poison();
  const lf::launched again =
      lf::launch(transpose_rows, lf::planned(p).items({nx, ny}), in.ptr, out.ptr, nx, ny, bad_shape.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(again.grid, (lf::dims{32, 25, 1}));
  EXPECT_EQ(mismatches(out.download(), expect), 0u);
}

// ---- an x the policy chooses, a multiple of the tile's width
// -------------------------------------------------

TEST_F(BlockShape, WideTileTransposeIsExactForTheXEachPolicyChooses) {
  const unsigned nx = 1000, ny = 777;
  std::vector<float> h(std::size_t(nx) * ny);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(i);
  const std::vector<float> expect = transpose_on_cpu(h, nx, ny);
  device_buffer<float> in(h.size()), out(h.size());
  device_buffer<unsigned> bad_shape(1);
  in.upload(h);
  const auto smem = [](int threads) {
    return std::size_t(tile) * (threads / block_rows + 1) * sizeof(float);
  };

  auto run = [&](const char* what, auto spec) {
    SCOPED_TRACE(what);
    out.poison();
    bad_shape.zero();
    const lf::launched l = lf::launch(transpose_wide, spec, in.ptr, out.ptr, nx, ny, bad_shape.ptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::printf("%s: %s grid=%s\n", what, l.plan().to_string().c_str(), l.grid.to_string().c_str());
    EXPECT_EQ(l.block.y, block_rows);
    EXPECT_EQ(l.block.x % 32, 0u);
    EXPECT_EQ(l.grid, (lf::dims{(nx + l.block.x - 1) / l.block.x, (ny + tile - 1) / tile, 1}));
    EXPECT_EQ(bad_shape.download()[0], 0u);
    EXPECT_EQ(mismatches(out.download(), expect), 0u) << "block " << l.block.to_string();
  };
  run("max_occupancy", lf::max_occupancy().items({nx, ny}).block_y(8).per_thread_y(4).smem_per_block(smem));
  run("max_occupancy(0)",
      lf::max_occupancy(0).items({nx, ny}).block_y(8).per_thread_y(4).smem_per_block(smem));
  run("fixed(512)", lf::fixed(512).items({nx, ny}).block_y(8).per_thread_y(4).smem_per_block(smem));
  run("fixed({64, 8})",
      lf::fixed(lf::dims{64, 8}).items({nx, ny}).block_y(8).per_thread_y(4).smem_per_block(smem));
  // A block the shape cannot make is refused before launching.
  out.poison();
  EXPECT_THROW(
      lf::launch(transpose_wide,
                 lf::fixed(lf::dims{32, 16}).items({nx, ny}).block_y(8).per_thread_y(4).smem_per_block(smem),
                 in.ptr, out.ptr, nx, ny, bad_shape.ptr),
      lf::error);
  const auto untouched = out.download();
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return std::isnan(v); }));

  std::string why;
  if (!load_autotune(why)) GTEST_SKIP() << why;
  run("autotune", lf::use("autotune(max_trials=16)")
                      .items({nx, ny})
                      .block_y(8)
                      .per_thread_y(4)
                      .smem_per_block(smem)
                      .rerunnable());
}

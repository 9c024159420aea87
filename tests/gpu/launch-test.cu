// SPDX-License-Identifier: MIT
// launchfit::launch on a real GPU: results through every path, validation before launch, cooperative
// grids, streams and graphs. Poisoned outputs, random inputs, every element checked.

#include <cooperative_groups.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "test_doubles.hpp"
#include "launchfit/args.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;
namespace cg = cooperative_groups;

namespace {

__global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// size_t n: an int argument must be converted, not reinterpreted.
__global__ void fill_index(unsigned long long* out, std::size_t n, unsigned long long offset) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = i + offset;
}

template <class T>
__global__ void scale(T* data, T factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

// Grid-stride sum, 2 x float4 in flight per thread.
__global__ void reduce_sum(const float4* in, std::size_t n4, double* out) {
  double acc = 0;
  std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (; i + stride < n4; i += 2 * stride) {
    const float4 a = in[i], b = in[i + stride];
    acc += double(a.x) + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
  }
  if (i < n4) acc += double(in[i].x) + in[i].y + in[i].z + in[i].w;
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

// Every block publishes its id, the grid syncs, then every block reads its right neighbour's: only correct
// when all blocks co-reside.
__global__ void neighbour_exchange(int* slots, int* seen, unsigned* grid_seen) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0) slots[blockIdx.x] = int(blockIdx.x) + 1;
  grid.sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = slots[(blockIdx.x + 1) % gridDim.x];
  if (blockIdx.x == 0 && threadIdx.x == 0) *grid_seen = gridDim.x;
}

// A parameter whose type converts from double implicitly and from int only explicitly, as <<<>>> chooses.
struct chosen_constructor {
  __host__ __device__ chosen_constructor(double) : which(1) {}
  __host__ __device__ explicit chosen_constructor(int) : which(2) {}
  int which;
};
__global__ void record_constructor(chosen_constructor c, int* out) { *out = c.which; }

__global__ void __launch_bounds__(128) bounded(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

__global__ void big_smem(float* out, int n) {
  extern __shared__ float tile[];
  const int words = 100 * 1024 / 4;
  for (int i = threadIdx.x; i < words; i += blockDim.x) tile[i] = float(i);
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tile[(i * 7) % words];
}

__global__ void block_smem(int* out, int n) {
  extern __shared__ int per_thread[];
  per_thread[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = per_thread[blockDim.x - 1 - threadIdx.x] + int(blockDim.x);
}

__global__ void spin_then_write(int* flag, int value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  *flag = value;
}

__global__ void copy_flag(const int* flag, int* out) { *out = *flag; }

// Records the cluster size each block ran in: proves the cluster attribute reached the launch.
__global__ void cluster_size(unsigned* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = cg::this_cluster().num_blocks();
}

using launchfit_test::device_buffer;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::string read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void expect_saxpy(float a, const std::vector<float>& x, const std::vector<float>& y0, const std::vector<float>& y) {
  ASSERT_EQ(x.size(), y.size());
  std::size_t bad = 0;
  // nvcc contracts a * x + y into one fma by default (-fmad=true); the host may not: accept either rounding.
  for (std::size_t i = 0; i < x.size(); ++i) bad += y[i] != std::fma(a, x[i], y0[i]) && y[i] != a * x[i] + y0[i];
  EXPECT_EQ(bad, 0u) << "mismatching elements";
}

class Launch : public ::testing::Test {
 protected:
  void SetUp() override { LAUNCHFIT_REQUIRE_GPU_OR_SKIP(); }
};

}  // namespace

TEST_F(Launch, SaxpyIsCorrectUnderEveryBuiltInPolicy) {
  const int n = 1'000'003;  // not a multiple of any block size
  const float a = 1.75f;
  const auto x = random_floats(n, 1), y0 = random_floats(n, 2);
  device_buffer<float> dx(n), dy(n);
  dx.upload(x);
  auto run = [&](auto spec) {
    dy.upload(y0);
    lf::launch(saxpy, spec.items(n), a, dx.ptr, dy.ptr, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_saxpy(a, x, y0, dy.download());
  };
  run(lf::max_occupancy());
  run(lf::bytes_in_flight(8));
  run(lf::fixed(256));
  run(lf::fixed(96));
  run(lf::use("max_occupancy()"));
  run(lf::max_occupancy().per_thread(1));
}

TEST_F(Launch, ArgumentsAreConvertedToTheKernelsParameterTypes) {
  const int n = 300'000;  // int given for a size_t parameter
  device_buffer<unsigned long long> out(n);
  out.poison();
  lf::launch(fill_index, lf::max_occupancy().grid_stride(n), out.ptr, n, 7);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = out.download();
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], static_cast<unsigned long long>(i) + 7) << i;
}

// A stream wrapper that converts to cudaStream_t and has no get() (as rmm's cuda_stream_view, a program's own
// RAII stream) is a stream: nvcc's front end made it a hard error ("has no member named 'get'"). And arguments
// convert as <<<>>> converts them, implicitly: an int for a parameter constructible from double and, explicitly
// only, from int runs the double constructor (a static_cast chose the explicit one).
struct converting_stream {
  cudaStream_t s;
  operator cudaStream_t() const { return s; }
};
TEST_F(Launch, ArgumentsConvertImplicitlyAndAStreamThatConvertsIsAStream) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  device_buffer<int> out(1);
  out.poison();
  lf::launch(record_constructor, lf::fixed(32, 1).on(converting_stream{s}), 5, out.ptr);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(out.download()[0], 1) << "the explicit constructor was chosen";
  const chosen_constructor as_a_call_converts = 5;  // what <<<>>> and a call choose
  EXPECT_EQ(as_a_call_converts.which, 1);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(Launch, TemplateKernels) {
  const int n = 5000;
  auto hf = random_floats(n, 3);
  std::vector<double> hd(hf.begin(), hf.end());
  device_buffer<float> f(n);
  device_buffer<double> d(n);
  f.upload(hf);
  d.upload(hd);
  lf::launch(scale<float>, lf::max_occupancy().items(n), f.ptr, 2.0f, n);
  lf::launch(scale<double>, lf::max_occupancy().items(n), d.ptr, 3, n);  // int -> double
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto rf = f.download();
  const auto rd = d.download();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(rf[i], hf[i] * 2.0f);
    ASSERT_EQ(rd[i], hd[i] * 3.0);
  }
}

TEST_F(Launch, GridStrideReductionUnderBytesInFlight) {
  const std::size_t n = std::size_t(1) << 26;  // 256 MB
  const auto h = random_floats(n, 4);
  device_buffer<float> in(n);
  device_buffer<double> out(1);
  in.upload(h);
  double want = 0;
  for (float v : h) want += v;
  for (auto spec : {lf::bytes_in_flight(32).grid_stride(n / 4), lf::bytes_in_flight(32, 65536).grid_stride(n / 4)}) {
    ASSERT_EQ(cudaMemset(out.ptr, 0, sizeof(double)), cudaSuccess);
    lf::launch(reduce_sum, spec, reinterpret_cast<const float4*>(in.ptr), n / 4, out.ptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_NEAR(out.download()[0], want, 1e-6 * n);
  }
  const lf::plan& p = lf::plan_for(reduce_sum, lf::bytes_in_flight(32).grid_stride(n / 4));
  EXPECT_GE(p.resident_blocks() * p.block_threads / 32 * 32 * 32, 32 * 1024 * p.sm_count);
}

TEST_F(Launch, MaxOccupancyMatchesTheDriversPotentialBlockSize) {
  int min_grid = 0, block = 0;
  LF_CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, saxpy, 0, 0));
  const lf::plan& p = lf::plan_for(saxpy, lf::max_occupancy(0));
  EXPECT_EQ(p.block_threads, block);
  EXPECT_EQ(p.resident_blocks(), min_grid);
  // The default tie-break (block nearest 256) keeps the same number of resident threads.
  const lf::plan& preferred = lf::plan_for(saxpy, lf::max_occupancy().items(1 << 24));
  EXPECT_EQ(preferred.resident_blocks() * preferred.block_threads, static_cast<long long>(min_grid) * block);
  int active = 0;
  LF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, saxpy, preferred.block_threads, 0));
  EXPECT_EQ(preferred.blocks_per_sm, active);
}

TEST_F(Launch, CooperativeGridIsExactlyCoResidentAndSyncs) {
  const lf::plan& p = lf::plan_for(neighbour_exchange, lf::cooperative());
  int per_sm = 0, sms = 0, dev = 0;
  LF_CUDA_CHECK(cudaGetDevice(&dev));
  LF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  LF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, neighbour_exchange, p.block_threads, 0));
  ASSERT_EQ(p.resident_blocks(), static_cast<long long>(per_sm) * sms);
  const int blocks = per_sm * sms;
  device_buffer<int> slots(blocks), seen(blocks);
  device_buffer<unsigned> grid_seen(1);
  slots.poison();
  seen.poison();
  lf::launch(neighbour_exchange, lf::cooperative(), slots.ptr, seen.ptr, grid_seen.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(grid_seen.download()[0], static_cast<unsigned>(blocks));
  const auto h = seen.download();
  for (int b = 0; b < blocks; ++b) ASSERT_EQ(h[b], (b + 1) % blocks + 1) << b;
  std::printf("cooperative grid: %d blocks = %d per SM x %d SMs (block %d)\n", blocks, per_sm, sms, p.block_threads);
}

TEST_F(Launch, CooperativeRefusesMoreBlocksPerSmThanFitBeforeLaunching) {
  const lf::plan& p = lf::plan_for(neighbour_exchange, lf::cooperative());
  device_buffer<int> slots(1), seen(1);
  device_buffer<unsigned> grid_seen(1);
  try {
    lf::launch(neighbour_exchange, lf::cooperative(p.blocks_per_sm + 1, p.block_threads), slots.ptr, seen.ptr,
               grid_seen.ptr);
    FAIL() << "launched";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("co-reside"), std::string::npos) << e.what();
    EXPECT_NE(e.kernel().find("neighbour_exchange"), std::string::npos) << e.kernel();
  }
}

TEST_F(Launch, BlockAboveLaunchBoundsIsRefusedAndNothingRuns) {
  device_buffer<int> out(1024);
  LF_CUDA_CHECK(cudaMemset(out.ptr, 0, 1024 * sizeof(int)));
  try {
    lf::launch(bounded, lf::fixed(256, 4), out.ptr);
    FAIL() << "launched";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("maxThreadsPerBlock 128"), std::string::npos) << what;
    EXPECT_NE(what.find("bounded"), std::string::npos) << what;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int v : out.download()) ASSERT_EQ(v, 0);
  lf::launch(bounded, lf::max_occupancy().items(1024), out.ptr);  // the policy respects the bound
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int v : out.download()) ASSERT_EQ(v, 1);
  EXPECT_LE(lf::plan_for(bounded, lf::max_occupancy().items(1024)).block_threads, 128);
}

TEST_F(Launch, DynamicSmemAbove48KRaisesTheLimitAutomatically) {
  const int n = 100'000;
  device_buffer<float> out(n);
  out.poison();
  lf::launch(big_smem, lf::max_occupancy().items(n).smem(100 * 1024), out.ptr, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = out.download();
  const int words = 100 * 1024 / 4;
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], float((i * 7) % words)) << i;
  EXPECT_EQ(lf::plan_for(big_smem, lf::max_occupancy().items(n).smem(100 * 1024)).occupancy.active_blocks_per_sm, 2);
}

TEST_F(Launch, SmemPerBlockRuleWithACapturingLambda) {
  const int n = 77'777;
  const std::size_t bytes_per_thread = sizeof(int);
  device_buffer<int> out(n);
  out.poison();
  auto spec = lf::max_occupancy().items(n).smem_per_block(
      [bytes_per_thread](int block) { return bytes_per_thread * static_cast<std::size_t>(block); });
  lf::launch(block_smem, spec, out.ptr, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const lf::plan& p = lf::plan_for(block_smem, spec);
  EXPECT_EQ(p.dynamic_smem_bytes, p.block_threads * bytes_per_thread);
  const auto h = out.download();
  const int b = p.block_threads;
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], (b - 1 - i % b) + b) << i;
}

TEST_F(Launch, StreamOrderIsRespected) {
  cudaStream_t s;
  LF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  device_buffer<int> flag(1), out(1);
  LF_CUDA_CHECK(cudaMemset(flag.ptr, 0, sizeof(int)));
  for (int round = 1; round <= 5; ++round) {
    lf::launch(spin_then_write, lf::fixed(1, 1).on(s), flag.ptr, round, 2'000'000LL);
    lf::launch(copy_flag, lf::fixed(1, 1).on(s), flag.ptr, out.ptr);
    int h = -1;
    LF_CUDA_CHECK(cudaMemcpyAsync(&h, out.ptr, sizeof(int), cudaMemcpyDeviceToHost, s));
    LF_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(h, round);
  }
  LF_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_F(Launch, LaunchesInsideStreamCaptureKeepEveryAttribute) {
  cudaStream_t s;
  LF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 123'457;
  const float a = -0.5f;
  const auto x = random_floats(n, 5), y0 = random_floats(n, 6);
  device_buffer<float> dx(n), dy(n);
  dx.upload(x);
  dy.upload(y0);
  const lf::plan& cp = lf::plan_for(neighbour_exchange, lf::cooperative());
  const int blocks = static_cast<int>(cp.resident_blocks());
  device_buffer<int> slots(blocks), seen(blocks);
  device_buffer<unsigned> grid_seen(1);
  seen.poison();

  cudaGraph_t graph;
  LF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  lf::launch(saxpy, lf::max_occupancy().items(n).on(s), a, dx.ptr, dy.ptr, n);
  lf::launch(neighbour_exchange, lf::cooperative().on(s), slots.ptr, seen.ptr, grid_seen.ptr);
  LF_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  // The cooperative attribute must survive into the graph node.
  size_t count = 0;
  LF_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  LF_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int cooperative_nodes = 0;
  for (auto node : nodes) {
    cudaLaunchAttributeValue v{};
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeCooperative, &v) == cudaSuccess && v.cooperative)
      ++cooperative_nodes;
  }
  EXPECT_EQ(cooperative_nodes, 1);
  cudaGraphExec_t exec;
  LF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  LF_CUDA_CHECK(cudaGraphLaunch(exec, s));
  LF_CUDA_CHECK(cudaStreamSynchronize(s));
  expect_saxpy(a, x, y0, dy.download());
  const auto h = seen.download();
  for (int b = 0; b < blocks; ++b) ASSERT_EQ(h[b], (b + 1) % blocks + 1) << b;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_F(Launch, APlanIsMadeOnceAndTheCacheKnowsItsDevice) {
  const int n = 1000;
  std::vector<float> hx(n), hy(n, 0.f);
  for (int i = 0; i < n; ++i) hx[i] = static_cast<float>(i % 7);  // small integers: every sum is exact
  device_buffer<float> x(n), y(n);
  x.upload(hx);
  y.upload(hy);
  lf::launch(saxpy, lf::fixed(64).items(n), 1.f, x.ptr, y.ptr, n);
  const std::size_t after_first = lf::cache().size();
  for (int i = 0; i < 100; ++i) lf::launch(saxpy, lf::fixed(64).items(n), 1.f, x.ptr, y.ptr, n);
  EXPECT_EQ(lf::cache().size(), after_first);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = y.download();
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], 101.f * hx[i]) << i;  // every one of the 101 launches ran
  bool found = false;
  for (const auto& c : lf::cache().plans()) {
    if (c.plan.policy == "fixed(block=64,grid=0)" && c.kernel.find("saxpy") != std::string::npos) {
      found = true;
      EXPECT_EQ(c.device_uuid.rfind("GPU-", 0), 0u) << c.device_uuid;
      EXPECT_EQ(c.plan.block_threads, 64);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(Launch, ZeroItemsIsANoOp) {
  device_buffer<float> x(1), y(1);
  EXPECT_NO_THROW(lf::launch(saxpy, lf::max_occupancy().items(0), 1.f, x.ptr, y.ptr, 0));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(Launch, OverflowingGridIsRefused) {
  device_buffer<float> x(1), y(1);
  EXPECT_THROW(lf::launch(saxpy, lf::fixed(32).items(std::uint64_t(1) << 40), 1.f, x.ptr, y.ptr, 0), lf::error);
}

// ---- driver-API kernels ------------------------------------------------------------------------------

struct saxpy_args {
  float a;
  const float* x;
  float* y;
  int n;
};

class DriverLaunch : public Launch {};

TEST_F(DriverLaunch, PtxCubinAndInMemoryModulesWithVariadicAndAggregateArguments) {
  LF_CUDA_CHECK(cudaFree(nullptr));  // make the primary context current
  const int n = 654'321;
  const float a = 3.25f;
  const auto x = random_floats(n, 7), y0 = random_floats(n, 8);
  device_buffer<float> dx(n), dy(n);
  dx.upload(x);
  const std::string ptx = read_file(LAUNCHFIT_TEST_PTX);
  ASSERT_FALSE(ptx.empty());
  lf::module modules[] = {lf::module::from_file(LAUNCHFIT_TEST_PTX), lf::module::from_file(LAUNCHFIT_TEST_CUBIN),
                          lf::module::from_ptx(ptx)};
  for (const lf::module& m : modules) {
    const lf::kernel k = m.get("saxpy");
    dy.upload(y0);
    lf::launch(k, lf::max_occupancy().items(n), a, static_cast<const float*>(dx.ptr), dy.ptr, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_saxpy(a, x, y0, dy.download());
    dy.upload(y0);
    lf::launch(k, lf::bytes_in_flight(8).items(n), lf::args(saxpy_args{a, dx.ptr, dy.ptr, n}));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_saxpy(a, x, y0, dy.download());
  }
}

TEST_F(DriverLaunch, WrongArgumentCountOrSizeIsRefusedBeforeLaunch) {
  LF_CUDA_CHECK(cudaFree(nullptr));
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("fill_sized");
  if (!k.param_sizes()) GTEST_SKIP() << "driver does not report parameter info";
  device_buffer<float> out(64);
  LF_CUDA_CHECK(cudaMemset(out.ptr, 0, 64 * sizeof(float)));
  try {
    lf::launch(k, lf::fixed(64, 1), out.ptr, 64ull);
    FAIL() << "launched with 2 of 3 arguments";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("3 parameters, 2 arguments"), std::string::npos) << e.what();
    EXPECT_EQ(e.kernel(), "fill_sized");
  }
  try {
    lf::launch(k, lf::fixed(64, 1), out.ptr, 64, 1.0f);  // int (4 B) for an unsigned long long (8 B)
    FAIL() << "launched with a 4-byte argument for an 8-byte parameter";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 1 is 4 bytes"), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (float v : out.download()) ASSERT_EQ(v, 0.f);  // nothing ran
  lf::launch(k, lf::fixed(64, 1), out.ptr, 64ull, 2.5f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (float v : out.download()) ASSERT_EQ(v, 2.5f);
}

TEST_F(DriverLaunch, MissingKernelNameIsAClearError) {
  LF_CUDA_CHECK(cudaFree(nullptr));
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  try {
    (void)m.get("no_such_kernel");
    FAIL();
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos);
  }
  EXPECT_THROW(lf::module::from_file("/nonexistent/kernels.cubin"), lf::error);
}

// get() from many threads at once (it records the kernels it hands out), then a launch of each result.
TEST_F(DriverLaunch, GetIsThreadSafe) {
  LF_CUDA_CHECK(cudaFree(nullptr));
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  std::vector<std::thread> threads;
  std::vector<std::uintptr_t> ids(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) ids[t] = m.get(i % 2 ? "saxpy" : "count_blocks").id();
      ids[t] = m.get("saxpy").id();
    });
  }
  for (auto& th : threads) th.join();
  for (std::uintptr_t id : ids) EXPECT_EQ(id, m.get("saxpy").id());
  const int n = 1000;
  device_buffer<float> dx(n), dy(n);
  LF_CUDA_CHECK(cudaMemset(dx.ptr, 0, n * sizeof(float)));
  LF_CUDA_CHECK(cudaMemset(dy.ptr, 0, n * sizeof(float)));
  lf::launch(m.get("saxpy"), lf::fixed(128).items(n), 1.0f, static_cast<const float*>(dx.ptr), dy.ptr, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Without lf::args a struct is one argument: saxpy takes four, so it is refused before launching.
TEST_F(DriverLaunch, AStructWithoutArgsIsOneArgument) {
  LF_CUDA_CHECK(cudaFree(nullptr));
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("saxpy");
  if (!k.param_sizes()) GTEST_SKIP() << "driver does not report parameter info";
  try {
    lf::launch(k, lf::fixed(64).items(64), saxpy_args{1.0f, nullptr, nullptr, 64});
    FAIL() << "a struct was unpacked without lf::args";
  } catch (const lf::error& e) {
    EXPECT_NE(e.message().find("kernel takes 4 parameters, 1 arguments given"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.code(), lf::errc::invalid_argument);
  }
  lf::module moved = std::move(m);
  try {
    (void)m.get("saxpy");  // NOLINT(bugprone-use-after-move): a moved-from module refuses
    FAIL() << "a moved-from module handed out a kernel";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::invalid_argument) << e.what();
  }
  EXPECT_EQ(moved.get("saxpy").id(), k.id());
}

TEST_F(Launch, ClusterDimsReachTheLaunchAndABadGridIsRefused) {
  device_buffer<unsigned> out(8);
  out.poison();
  lf::launch(cluster_size, lf::fixed(64, 8).cluster({2, 1, 1}), out.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (unsigned v : out.download()) ASSERT_EQ(v, 2u);
  try {
    lf::launch(cluster_size, lf::fixed(64, 3).cluster({2, 1, 1}), out.ptr);
    FAIL() << "launched a grid of 3 in clusters of 2";
  } catch (const lf::error& e) {
    // Refused when the plan is made: a fixed grid must be made of whole clusters.
    EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_PLAN");
    EXPECT_EQ(e.call(), "validate(cluster)");
    EXPECT_NE(e.message().find("grid 3 is not made of whole clusters of 2"), std::string::npos) << e.what();
  }
}

TEST_F(DriverLaunch, NoCurrentContextIsAClearError) {
  LF_CUDA_CHECK(cudaFree(nullptr));
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("count_blocks");
  std::string what;
  std::thread t([&] {  // a fresh thread has no current context until it makes one
    try {
      lf::launch(k, lf::fixed(32, 1), static_cast<unsigned*>(nullptr), static_cast<unsigned*>(nullptr));
    } catch (const lf::error& e) {
      what = e.what();
    }
  });
  t.join();
  EXPECT_NE(what.find("no current CUDA context"), std::string::npos) << what;
}

TEST_F(Launch, UnknownDeviceOrdinalSaysHowManyThereAre) {
  try {
    (void)lf::device_limits::query(999);
    FAIL() << "no error";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_INVALID_DEVICE");
    EXPECT_NE(e.message().find("device 999 does not exist"), std::string::npos) << e.what();
  }
}

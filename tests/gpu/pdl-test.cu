// SPDX-License-Identifier: MIT
// Programmatic dependent launch on a real GPU (sm_90+): a consumer launched with .pdl() overlaps its
// producer (it starts before the producer ends, which a plain launch never does) and still reads exactly what
// the producer wrote, over many iterations; the same in a captured CUDA graph, whose edge from producer to
// consumer is programmatic; and a plain launch of the same kernel has its own plan. Every value is checked
// on the host.

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

namespace {

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__host__ __device__ unsigned value_of(unsigned iter, unsigned i) {
  return (iter + 1) * 2654435761u ^ (i * 40503u);
}

// Lets its dependent start at once, then (after spin_ns) writes data for this iteration. The dependent waits
// in cudaGridDependencySynchronize() for this whole grid to complete and its writes to be visible, so the
// writes may follow the trigger. end_ns[iter]: when the last block finished writing.
__global__ void producer(unsigned* data, unsigned n, unsigned iter, unsigned long long spin_ns,
                         unsigned long long* end_ns) {
  cudaTriggerProgrammaticLaunchCompletion();
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    data[i] = value_of(iter, i);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(end_ns + iter, now_ns());
}

// start_ns[iter]: when its first block started (before waiting for the producer). Counts values that are not
// this iteration's, and accumulates what it read.
__global__ void consumer(const unsigned* data, unsigned* sum, unsigned n, unsigned iter, unsigned* mismatches,
                         unsigned long long* start_ns) {
  if (threadIdx.x == 0) atomicMin(start_ns + iter, now_ns());
  cudaGridDependencySynchronize();
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const unsigned v = data[i];
    if (v != value_of(iter, i)) atomicAdd(mismatches, 1u);
    sum[i] += v;
  }
}

using launchfit_test::device_buffer;

struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() {
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
      throw std::runtime_error("stream");
  }
  ~stream_holder() { cudaStreamDestroy(s); }
};

constexpr unsigned n = 1u << 20;
constexpr int producer_block = 256, producer_grid = 16;  // few blocks: most SMs stay free for the consumer
constexpr unsigned long long spin_ns = 20'000;

// One producer/consumer pair per iteration, and what they leave behind.
struct pipeline {
  unsigned iterations;
  device_buffer<unsigned> data{n}, sum{n}, mismatches{1};
  device_buffer<unsigned long long> start_ns, end_ns;

  explicit pipeline(unsigned iters) : iterations(iters), start_ns(iters), end_ns(iters) { reset(); }
  void reset() {
    data.fill_bytes(0);
    sum.fill_bytes(0);
    mismatches.fill_bytes(0);
    start_ns.fill_bytes(0xff);
    end_ns.fill_bytes(0);
    // The memsets ran on the legacy stream; the pipeline's stream does not wait for it.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  template <class ConsumerSpec>
  lf::launched enqueue(unsigned iter, cudaStream_t s, const ConsumerSpec& consumer_spec) {
    lf::launch(producer, lf::fixed(producer_block, producer_grid).on(s), data.ptr, n, iter, spin_ns,
               end_ns.ptr);
    return lf::launch(consumer, consumer_spec, static_cast<const unsigned*>(data.ptr), sum.ptr, n, iter,
                      mismatches.ptr, start_ns.ptr);
  }
  // Elements of sum that are not `times` x the sum of every iteration's values.
  std::size_t wrong_sums(unsigned times) const {
    const auto h = sum.download();
    std::size_t wrong = 0;
    for (unsigned i = 0; i < n; ++i) {
      unsigned expect = 0;
      for (unsigned it = 0; it < iterations; ++it) expect += value_of(it, i);
      wrong += h[i] != expect * times;
    }
    return wrong;
  }
  // Iterations whose consumer started before its producer finished.
  unsigned overlaps() const {
    const auto s = start_ns.download(), e = end_ns.download();
    unsigned count = 0;
    for (unsigned it = 0; it < iterations; ++it) count += s[it] < e[it];
    return count;
  }
};

auto consumer_spec(cudaStream_t s) { return lf::max_occupancy().items(n).on(s).pdl(); }
auto plain_consumer_spec(cudaStream_t s) { return lf::max_occupancy().items(n).on(s); }

class Pdl : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    int major = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    if (major < 9) {
      // Below sm_90 the launch is refused before anything runs.
      device_buffer<unsigned> d(n), s(n), m(1);
      device_buffer<unsigned long long> t(1);
      try {
        lf::launch(consumer, lf::max_occupancy().items(n).pdl(), static_cast<const unsigned*>(d.ptr), s.ptr,
                   n, 0u, m.ptr, t.ptr);
        ADD_FAILURE() << "a programmatic launch below sm_90 was not refused";
      } catch (const lf::error& e) {
        EXPECT_EQ(e.code(), lf::errc::invalid_plan) << e.what();
      }
      GTEST_SKIP() << "programmatic dependent launch needs sm_90 or newer";
    }
  }
};

// Programmatic edges of a graph, and all its edges.
struct edge_count {
  std::size_t total = 0, programmatic = 0, programmatic_producer_to_consumer = 0;
};

edge_count count_edges(cudaGraph_t graph) {
  edge_count c;
  std::size_t count = 0;
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  EXPECT_EQ(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count), cudaSuccess);
  c.total = count;
  // Producer nodes run producer_grid x producer_block; consumer nodes a grid covering n.
  auto grid_of = [](cudaGraphNode_t node) {
    cudaKernelNodeParams p{};
    const cudaError_t st = cudaGraphKernelNodeGetParams(node, &p);
    EXPECT_EQ(st, cudaSuccess) << cudaGetErrorName(st);
    return p.gridDim.x;
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (data[i].type != cudaGraphDependencyTypeProgrammatic) continue;
    ++c.programmatic;
    if (i == 0)
      std::printf("programmatic edge: from_port %u to_port %u\n", data[i].from_port, data[i].to_port);
    c.programmatic_producer_to_consumer +=
        grid_of(from[i]) == unsigned(producer_grid) && grid_of(to[i]) != unsigned(producer_grid);
  }
  return c;
}

}  // namespace

TEST_F(Pdl, ConsumerOverlapsItsProducerAndReadsExactlyWhatItWrote) {
  stream_holder st;
  const unsigned iterations = 200;
  pipeline p(iterations);
  for (unsigned it = 0; it < iterations; ++it) {
    const lf::launched l = p.enqueue(it, st.s, consumer_spec(st.s));
    ASSERT_TRUE(l.plan().options.programmatic);
  }
  ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  EXPECT_EQ(p.mismatches.download()[0], 0u) << "a consumer read data its producer had not finished writing";
  EXPECT_EQ(p.wrong_sums(1), 0u);
  const unsigned overlapped = p.overlaps();
  std::printf("with .pdl(): %u of %u consumers started before their producer finished\n", overlapped,
              iterations);
  EXPECT_GT(overlapped, 0u)
      << "no consumer started early: the programmatic attribute did not reach the launch";

  // The same pair without .pdl(): stream order, never an overlap, the same results.
  pipeline q(50);
  for (unsigned it = 0; it < q.iterations; ++it) {
    const lf::launched l = q.enqueue(it, st.s, plain_consumer_spec(st.s));
    ASSERT_FALSE(l.plan().options.programmatic);
  }
  ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  EXPECT_EQ(q.mismatches.download()[0], 0u);
  EXPECT_EQ(q.wrong_sums(1), 0u);
  EXPECT_EQ(q.overlaps(), 0u) << "a plain launch started before the kernel before it ended";
}

TEST_F(Pdl, PlainAndProgrammaticLaunchesOfOneKernelHaveTheirOwnPlans) {
  stream_holder st;
  const lf::plan& programmatic = lf::plan_for(consumer, consumer_spec(st.s));
  const lf::plan& plain = lf::plan_for(consumer, plain_consumer_spec(st.s));
  EXPECT_TRUE(programmatic.options.programmatic);
  EXPECT_FALSE(plain.options.programmatic);
  EXPECT_NE(&programmatic, &plain);
  EXPECT_EQ(programmatic.block, plain.block) << "the same policy decides the block";
  // Launch order does not matter: each launch gets its own plan.
  pipeline p(2);
  EXPECT_EQ(&p.enqueue(0, st.s, plain_consumer_spec(st.s)).plan(), &plain);
  EXPECT_EQ(&p.enqueue(1, st.s, consumer_spec(st.s)).plan(), &programmatic);
  ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  EXPECT_EQ(p.mismatches.download()[0], 0u);
  EXPECT_EQ(p.wrong_sums(1), 0u);
}

TEST_F(Pdl, CapturedGraphHasProgrammaticEdgesAndReplaysCorrectly) {
  stream_holder st;
  const unsigned pairs = 10, replays = 5;
  {
    // Plans made before capturing (planning calls the driver).
    pipeline warm(1);
    warm.enqueue(0, st.s, consumer_spec(st.s));
    warm.enqueue(0, st.s, plain_consumer_spec(st.s));
    ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  }
  for (const bool programmatic : {true, false}) {
    SCOPED_TRACE(programmatic ? "with .pdl()" : "plain");
    pipeline p(pairs);
    ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
    cudaGraph_t graph = nullptr;
    LF_CUDA_CHECK(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
    for (unsigned it = 0; it < pairs; ++it) {
      if (programmatic) {
        p.enqueue(it, st.s, consumer_spec(st.s));
      } else {
        p.enqueue(it, st.s, plain_consumer_spec(st.s));
      }
    }
    LF_CUDA_CHECK(cudaStreamEndCapture(st.s, &graph));
    const edge_count edges = count_edges(graph);
    EXPECT_EQ(edges.total, 2u * pairs - 1) << "a chain producer -> consumer -> producer ...";
    EXPECT_EQ(edges.programmatic, programmatic ? pairs : 0u);
    EXPECT_EQ(edges.programmatic_producer_to_consumer, programmatic ? pairs : 0u);

    cudaGraphExec_t exec = nullptr;
    LF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (unsigned r = 0; r < replays; ++r) LF_CUDA_CHECK(cudaGraphLaunch(exec, st.s));
    LF_CUDA_CHECK(cudaStreamSynchronize(st.s));
    EXPECT_EQ(p.mismatches.download()[0], 0u) << "a replayed consumer read unfinished data";
    EXPECT_EQ(p.wrong_sums(replays), 0u);
    std::printf("graph %s: %zu edges, %zu programmatic\n", programmatic ? "with .pdl()" : "plain",
                edges.total, edges.programmatic);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

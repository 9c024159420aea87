// SPDX-License-Identifier: MIT
// launchfit/base.hpp launches at the least compile cost: it must not bring the standard headers that made a
// launching .cu file compile ~3x slower than the same file with <<<>>> (tests/bench/compile-cost.sh). This
// checks the include set, not a time: each of these headers cost nvcc's host pass 0.3-0.8 s on its own.

#include <launchfit/base.hpp>

#if defined(__GLIBCXX__)
#if defined(_GLIBCXX_STRING) || defined(_BASIC_STRING_H)
#error "launchfit/base.hpp includes <string>"
#endif
#if defined(_GLIBCXX_MEMORY) || defined(_SHARED_PTR_H)
#error "launchfit/base.hpp includes <memory>"
#endif
#if defined(_GLIBCXX_FUNCTIONAL) || defined(_GLIBCXX_STD_FUNCTION_H)
#error "launchfit/base.hpp includes <functional>"
#endif
#if defined(_GLIBCXX_MAP) || defined(_GLIBCXX_UNORDERED_MAP) || defined(_GLIBCXX_VECTOR)
#error "launchfit/base.hpp includes a container (<map>, <unordered_map> or <vector>)"
#endif
#if defined(_GLIBCXX_TUPLE) || defined(_GLIBCXX_OPTIONAL) || defined(_GLIBCXX_STDEXCEPT)
#error "launchfit/base.hpp includes <tuple>, <optional> or <stdexcept>"
#endif
#endif
#if defined(__cuda_cuda_h__) || defined(SPDLOG_VERSION) || defined(FMT_VERSION) || defined(BOOST_PFR_HPP)
#error "launchfit/base.hpp includes cuda.h, spdlog, fmt or Boost.PFR"
#endif

namespace lf = launchfit;

namespace {

void saxpy(float, const float*, float*, int) {
}  // stands for a __global__ function: launch() takes its pointer

// Instantiated, never run (no GPU here): everything a plain launch needs compiles from base.hpp alone.
[[maybe_unused]] lf::launched launch_saxpy(float a, const float* x, float* y, int n) {
  return lf::launch(saxpy, lf::max_occupancy().items(n), a, x, y, n);
}
[[maybe_unused]] lf::launched launch_with_everything(float a, const float* x, float* y, int n,
                                                     cudaStream_t s) {
  auto spec = lf::bytes_in_flight(16).grid_stride(n).on(s).smem_per_block(
      [](int block) { return static_cast<std::size_t>(block) * 4; });
  spec.reset([] {});
  return lf::launch(saxpy, spec, a, x, y, lf::from_plan([n](const auto&) { return n; }));
}
void no_arguments() {}
void wide(std::size_t, double) {}
[[maybe_unused]] lf::launched launch_others() {
  lf::launch(no_arguments, lf::cooperative());
  return lf::launch(wide, lf::fixed(64, 1), 3, 1.5f);  // converted to the parameters' types first
}
[[maybe_unused]] const lf::plan& plan_saxpy(int n) { return lf::plan_for(saxpy, lf::fixed(256).items(n)); }

}  // namespace

#include <gtest/gtest.h>

TEST(Base, SpecsBuildWithoutTheFullHeaders) {
  const auto s = lf::fixed(128).items(1000).per_thread(4).smem(64);
  EXPECT_EQ(s.work_shape().kind, lf::work::shape::items);
  EXPECT_EQ(s.work_shape().n, 1000u);
  EXPECT_EQ(s.smem_bytes(), 64u);
  EXPECT_EQ(s.policy_value().parameters().block, 128);
  EXPECT_EQ(s.smem_fn(), nullptr);
}

TEST(Base, SmemRuleAndResetAreHeldByTheSpec) {
  int calls = 0;
  auto s = lf::max_occupancy().items(10).smem_per_block(
      [](int block) { return static_cast<std::size_t>(block) * 2; });
  s.reset([&calls] { ++calls; });
  ASSERT_NE(s.smem_fn(), nullptr);
  EXPECT_EQ((*s.smem_fn())(128), 256u);
  ASSERT_NE(s.reset_fn(), nullptr);
  (*s.reset_fn())();
  const auto copy = s;  // a copy holds its own rule and reset, usable after the original is gone
  (*copy.reset_fn())();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ((*copy.smem_fn())(64), 128u);
  EXPECT_TRUE(copy.is_rerunnable());
}

TEST(Base, LargeCapturesAreHeldToo) {
  struct big {
    double v[8];
  };
  const big b{{1, 2, 3, 4, 5, 6, 7, 8}};
  auto s = lf::max_occupancy().smem_per_block([b](int) { return static_cast<std::size_t>(b.v[7]); });
  const auto copy = s;
  s = lf::max_occupancy();
  EXPECT_EQ(s.smem_fn(), nullptr);
  EXPECT_EQ((*copy.smem_fn())(32), 8u);
}

// A named spec refined with 1-D work after 2-D work is the 1-D spec a fresh one makes: items(n) after
// items({1024, 768}) kept rank 2 and ny 768 (a 2-D block, each x index run 768 times).
TEST(Base, OneDimensionalWorkReplacesAnEarlierExtent) {
  auto s = lf::max_occupancy();
  s.items(lf::extent{1024, 768, 4});
  ASSERT_EQ(s.work_shape().rank, 3);
  const auto fresh_items = lf::max_occupancy().items(4096).work_shape();
  s.items(4096);
  EXPECT_EQ(s.work_shape().rank, fresh_items.rank);
  EXPECT_EQ(s.work_shape().ny, 1u);
  EXPECT_EQ(s.work_shape().nz, 1u);
  s.items(lf::extent{64, 32});
  s.grid_stride(std::uint64_t{1} << 20);
  EXPECT_EQ(s.work_shape().rank, 1);
  EXPECT_EQ(s.work_shape().ny, 1u);
  s.items(lf::extent{64, 32});
  s.items(std::int64_t{4096});  // a signed count
  EXPECT_EQ(s.work_shape().rank, 1);
  s.items(lf::extent{64, 32});
  s.grid(lf::dims{8, 1, 1});
  EXPECT_EQ(s.work_shape().rank, 1);
  EXPECT_EQ(s.work_shape().ny, 1u);
  // A refined copy (rvalue and const setters) as well.
  const auto two_d = lf::max_occupancy().items(lf::extent{64, 32});
  EXPECT_EQ(two_d.items(100).work_shape().rank, 1);
  EXPECT_EQ(lf::max_occupancy().items(lf::extent{64, 32}).grid_stride(std::uint64_t{100}).work_shape().ny, 1u);
}

// A const spec (a policy kept in a static, refined per launch) refines into a copy with every setter, and is
// left as it was: none of these compiled on a const spec.
TEST(Base, AConstSpecRefinesIntoACopy) {
  static const auto base = lf::bytes_in_flight(16).on(reinterpret_cast<cudaStream_t>(0x42));
  const auto a = base.items(1000);
  EXPECT_EQ(a.work_shape().kind, lf::work::shape::items);
  EXPECT_EQ(a.work_shape().n, 1000u);
  EXPECT_EQ(a.stream(), reinterpret_cast<cudaStream_t>(0x42));
  EXPECT_EQ(base.work_shape().kind, lf::work::shape::none) << "refining a const spec changed it";
  EXPECT_EQ(base.items(7).work_shape().n, 7u);  // a signed count
  const auto b = base.grid_stride(std::int64_t{9});
  EXPECT_EQ(b.work_shape().kind, lf::work::shape::grid_stride);
  EXPECT_EQ(base.grid_stride(std::uint64_t{10}).work_shape().n, 10u);
  struct stream_handle {
    cudaStream_t get() const { return reinterpret_cast<cudaStream_t>(0x43); }
  };
  EXPECT_EQ(base.on(stream_handle{}).stream(), reinterpret_cast<cudaStream_t>(0x43));
  EXPECT_EQ(base.on(cudaStream_t{}).stream(), cudaStream_t{});
  EXPECT_EQ(base.stream(), reinterpret_cast<cudaStream_t>(0x42));
  const auto c = base.items(lf::extent{64, 32}).per_thread(2).per_thread_y(2).block_y(4).block_z(1)
                     .block_x_multiple(32).block_x_free().waves(2).sms(8).pdl();
  EXPECT_EQ(c.work_shape().rank, 2);
  EXPECT_TRUE(c.is_programmatic());
  EXPECT_EQ(c.sm_budget(), 8);
  EXPECT_FALSE(base.is_programmatic());
  const auto& cb = base;
  EXPECT_EQ(cb.smem(64).smem_bytes(), 64u);
  EXPECT_NE(cb.smem_per_block([](int t) { return static_cast<std::size_t>(t); }).smem_fn(), nullptr);
  EXPECT_EQ(base.smem_fn(), nullptr);
  EXPECT_TRUE(cb.rerunnable().is_rerunnable());
  EXPECT_TRUE(cb.reset([] {}).is_rerunnable());
  EXPECT_FALSE(base.is_rerunnable());
  EXPECT_TRUE(cb.cooperative().requires_cooperative());
  EXPECT_EQ(cb.cluster(lf::dims{2, 1, 1}).cluster_dims().x, 2u);
  EXPECT_EQ(cb.grid(lf::dims{3, 1, 1}).work_shape().kind, base.grid(lf::dims{3, 1, 1}).work_shape().kind);
  EXPECT_EQ(cb.shape(lf::block_shape{}).work_shape().kind, lf::work::shape::none);
  EXPECT_EQ(cb.blocks(lf::block_rule{}).work_shape().kind, lf::work::shape::none);
  EXPECT_EQ(base.cluster_dims().x, 1u);
  EXPECT_FALSE(base.requires_cooperative());
}

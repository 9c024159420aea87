// SPDX-License-Identifier: MIT
// Specs as CUDA programs write them, compiled by nvcc (which makes a narrowing conversion in braces an
// error): block, grid and work dimensions from int, unsigned and size_t variables, dim3 wherever dims go, and
// every stream handle in .on(). Compiling is most of the test; it runs on the CPU and checks what the specs
// hold, and that a value that does not fit is refused, naming it, never wrapped.

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <cuda/stream_ref>
#include <string>
#include <tuple>

#include "launchfit/args.hpp"
#include "launchfit/base.hpp"
#include "launchfit/error.hpp"

namespace lf = launchfit;

namespace {

static_assert(lf::dims{16, 16}.count() == 256, "dims from int literals are constant expressions");
static_assert(lf::dims{dim3(8, 4, 2)}.count() == 64, "and from a dim3");
constexpr lf::dims constant_block{std::size_t{32}, 8u, 1};
static_assert(constant_block.x == 32 && constant_block.y == 8, "mixed integer types in one list");

template <class T>
class SpecTypes : public testing::Test {};
using integer_types = testing::Types<int, unsigned, std::size_t, long long, unsigned short>;
TYPED_TEST_SUITE(SpecTypes, integer_types);

TYPED_TEST(SpecTypes, BlockGridAndWorkDimensionsFromVariables) {
  const TypeParam bx = 16, by = 8, bz = 2, gx = 40, gy = 30, nx = 1000, ny = 700, nz = 3;
  const auto two = lf::fixed({bx, by}).policy_value().parameters();
  EXPECT_EQ(two.bx, 16);
  EXPECT_EQ(two.by, 8);
  EXPECT_EQ(two.bz, 1);
  EXPECT_EQ(two.gx, 0);  // from the work
  const auto three = lf::fixed({bx, by, bz}, {gx, gy}).policy_value().parameters();
  EXPECT_EQ(three.bz, 2);
  EXPECT_EQ(three.gx, 40);
  EXPECT_EQ(three.gy, 30);
  EXPECT_EQ(three.gz, 1);
  const auto grid = lf::max_occupancy().grid({gx, gy}).work_shape();
  EXPECT_EQ(grid.kind, lf::work::shape::grid);
  EXPECT_EQ(grid.grid, (lf::dims{40u, 30u, 1u}));
  const auto items2 = lf::max_occupancy().items({nx, ny}).work_shape();
  EXPECT_EQ(items2.rank, 2);
  EXPECT_EQ(items2.n, 1000u);
  EXPECT_EQ(items2.ny, 700u);
  const auto items3 = lf::fixed({bx, by}).items({nx, ny, nz}).work_shape();
  EXPECT_EQ(items3.rank, 3);
  EXPECT_EQ(items3.nz, 3u);
  const auto one = lf::fixed(bx).items(nx).work_shape();
  EXPECT_EQ(one.n, 1000u);
  EXPECT_EQ(lf::fixed(bx, gx).policy_value().parameters().grid, 40);
  EXPECT_EQ(lf::max_occupancy().grid_stride(nx).work_shape().n, 1000u);
  // On a named spec too (the & setters).
  auto named = lf::cooperative();
  named.grid({gx, gy}).cluster({TypeParam{2}, TypeParam{1}});
  EXPECT_EQ(named.work_shape().grid, (lf::dims{40u, 30u, 1u}));
  EXPECT_EQ(named.cluster_dims(), (lf::dims{2u, 1u, 1u}));
}

TEST(SpecTypes, MixedIntegerTypesInOneList) {
  const int bx = 32;
  const std::size_t by = 4;
  const unsigned gx = 7;
  const long long ny = 1 << 20;
  const auto p = lf::fixed({bx, by}, {gx}).policy_value().parameters();
  EXPECT_EQ(p.bx, 32);
  EXPECT_EQ(p.by, 4);
  EXPECT_EQ(p.gx, 7);
  EXPECT_EQ(lf::max_occupancy().items({bx, ny}).work_shape().ny, std::uint64_t{1} << 20);
}

TEST(SpecTypes, Dim3WhereverDimsGo) {
  const dim3 block(16, 8), grid(40, 30, 2), cluster(2);
  const auto p = lf::fixed(block, grid).policy_value().parameters();
  EXPECT_EQ(p.bx, 16);
  EXPECT_EQ(p.by, 8);
  EXPECT_EQ(p.bz, 1);
  EXPECT_EQ(p.gx, 40);
  EXPECT_EQ(p.gz, 2);
  EXPECT_EQ(lf::fixed(dim3(256)).policy_value().parameters().bx, 256);
  const auto s = lf::max_occupancy().grid(grid).cluster(cluster);
  EXPECT_EQ(s.work_shape().grid, (lf::dims{40u, 30u, 2u}));
  EXPECT_EQ(s.cluster_dims(), (lf::dims{2u, 1u, 1u}));
  const lf::dims from_uint3 = make_uint3(3, 4, 5);
  EXPECT_EQ(from_uint3, (lf::dims{3u, 4u, 5u}));
  const lf::dims from_int3 = make_int3(3, 4, 5);
  EXPECT_EQ(from_int3.count(), 60u);
  EXPECT_EQ(lf::dims(dim3(7, 1, 1)), lf::dims(7));
}

TEST(SpecTypes, EveryStreamHandleInOn) {
  const auto s = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5a5a0});
  const auto cu = reinterpret_cast<CUstream>(std::uintptr_t{0x5a5b0});
  EXPECT_EQ(lf::max_occupancy().on(s).stream(), s);
  EXPECT_EQ(lf::max_occupancy().on(cu).stream(), reinterpret_cast<cudaStream_t>(cu));
  const cuda::stream_ref ref(s);
  EXPECT_EQ(lf::max_occupancy().on(ref).stream(), s);
  EXPECT_EQ(lf::fixed(128).items(10).on(cuda::stream_ref(cu)).stream(), reinterpret_cast<cudaStream_t>(cu));
  auto named = lf::bytes_in_flight(16);
  named.on(ref);
  EXPECT_EQ(named.stream(), s);
  EXPECT_EQ(lf::max_occupancy().on(0).stream(), nullptr);  // the file's default stream, as <<<>>>
  EXPECT_EQ(lf::max_occupancy().on(nullptr).stream(), nullptr);
}

// A value that does not fit is refused with launchfit::error naming it: never wrapped into a huge dimension.
std::string refusal(void (*f)()) {
  try {
    f();
  } catch (const lf::error& e) {
    EXPECT_EQ(e.code(), lf::errc::invalid_argument) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

volatile int minus_one = -1;  // run-time values: a constant would not compile
volatile long long minus_five = -5;
volatile std::size_t eight_g = std::size_t{1} << 33;
volatile unsigned three_g = 3000000000u;

TEST(SpecTypes, NegativeOrOutOfRangeValuesAreRefusedNamingThem) {
  EXPECT_EQ(refusal([] { (void)lf::fixed({minus_one, 4}); }), "dims x = -1 is negative");
  EXPECT_EQ(refusal([] { (void)lf::fixed({16, 16}, {4, minus_one}); }), "dims y = -1 is negative");
  EXPECT_EQ(refusal([] { (void)lf::max_occupancy().grid({std::size_t{eight_g}}); }),
            "dims x = 8589934592 is above 4294967295");
  EXPECT_EQ(refusal([] {
              (void)lf::max_occupancy().items({int{minus_one}, 16});
            }),
            "items nx = -1 is negative");
  EXPECT_EQ(refusal([] {
              (void)lf::max_occupancy().items({16, 16, static_cast<long long>(minus_five)});
            }),
            "items nz = -5 is negative");
  EXPECT_EQ(refusal([] { (void)lf::max_occupancy().items(int{minus_one}); }), "items n = -1 is negative");
  EXPECT_EQ(refusal([] { (void)lf::max_occupancy().grid_stride(static_cast<long long>(minus_five)); }),
            "grid_stride n = -5 is negative");
  EXPECT_EQ(refusal([] {
              (void)lf::fixed({unsigned{three_g}, 1u});
            }),
            "fixed block x = 3000000000 is above 2147483647");
  EXPECT_EQ(refusal([] { (void)lf::fixed(std::size_t{eight_g}); }),
            "fixed block = 8589934592 is above 2147483647");
  EXPECT_EQ(refusal([] { (void)lf::max_occupancy().cluster(make_int3(minus_one, 1, 1)); }),
            "dims x = -1 is negative");
}

// lf::args() under nvcc: an aggregate of one field did not compile (Boost.PFR's count of its fields fails in nvcc
// 13's front end), where two or more did. Each launch below is compiled (never run: it needs a GPU).
struct one_pointer {
  float* p;
};
struct one_vector {
  float2 v;
};
struct three_fields {
  float* p;
  int n;
  double d;
};
struct no_fields {};
// Two fields, the second of which any_field cannot initialise (std::optional's converting constructor and
// any_field's conversion are ambiguous): counted as two, never bound as one.
struct pointer_and_optional {
  float* p;
  std::optional<int> limit;
};
__global__ void pointer_kernel(float* p) {
  if (p) p[threadIdx.x] = 1.0f;
}
__global__ void vector_kernel(float2 v) { (void)v; }
__global__ void three_kernel(float* p, int n, double d) {
  if (p && threadIdx.x < static_cast<unsigned>(n)) p[threadIdx.x] = static_cast<float>(d);
}
static_assert(lf::detail::has_one_field<one_pointer>, "one field");
static_assert(lf::detail::has_one_field<one_vector>, "one field, itself an aggregate");
static_assert(!lf::detail::has_one_field<three_fields>, "three fields");
static_assert(!lf::detail::has_one_field<no_fields>, "no field");
static_assert(!lf::detail::has_one_field<pointer_and_optional>, "two fields, the second an optional");
__global__ void optional_kernel(float* p, std::optional<int> limit) {
  (void)limit;  // std::optional's members are host functions
  if (p) p[threadIdx.x] = 1.0f;
}

[[maybe_unused]] void launches_of_packed_arguments_compile(float* p, cudaGraph_t g) {
  (void)lf::launch(pointer_kernel, lf::fixed(32).items(32), lf::args(one_pointer{p}));
  (void)lf::launch(vector_kernel, lf::fixed(32).items(32), lf::args(one_vector{make_float2(1.0f, 2.0f)}));
  (void)lf::launch(three_kernel, lf::fixed(32).items(32), lf::args(three_fields{p, 32, 2.0}));
  (void)lf::add_kernel_node(g, {}, pointer_kernel, lf::fixed(32).items(32), lf::args(one_pointer{p}));
  (void)lf::launch(optional_kernel, lf::fixed(32).items(32), lf::args(pointer_and_optional{p, 3}));
}

TEST(PackedArguments, AreTheAggregatesFieldsInOrderWhateverTheirCount) {
  float x = 0.0f;
  const auto one = lf::detail::with_fields(one_pointer{&x}, [](const auto&... f) { return std::make_tuple(f...); });
  EXPECT_EQ(std::get<0>(one), &x);
  static_assert(std::tuple_size_v<decltype(one)> == 1, "one argument");
  const auto vec =
      lf::detail::with_fields(one_vector{make_float2(1.5f, 2.5f)}, [](const auto&... f) { return std::make_tuple(f...); });
  static_assert(std::tuple_size_v<decltype(vec)> == 1, "the vector is one argument");
  EXPECT_EQ(std::get<0>(vec).x, 1.5f);
  EXPECT_EQ(std::get<0>(vec).y, 2.5f);
  const auto three =
      lf::detail::with_fields(three_fields{&x, 7, 0.25}, [](const auto&... f) { return std::make_tuple(f...); });
  EXPECT_EQ(three, std::make_tuple(&x, 7, 0.25));
  const auto two = lf::detail::with_fields(pointer_and_optional{&x, 5},
                                           [](const auto&... f) { return std::make_tuple(f...); });
  EXPECT_EQ(std::get<0>(two), &x);
  EXPECT_EQ(std::get<1>(two), std::optional<int>(5));
  const auto none = lf::detail::with_fields(no_fields{}, [](const auto&... f) { return sizeof...(f); });
  EXPECT_EQ(none, 0u);
}

}  // namespace

// SPDX-License-Identifier: MIT
// Misuse of a spec's types, one case per LAUNCHFIT_MISUSE value: each must fail to compile at its marked line
// (compile-fail.cmake checks the line). Without LAUNCHFIT_MISUSE the file compiles: the failures are the
// cases'.

#include <launchfit/base.hpp>
#include <memory>
#include <string>

namespace lf = launchfit;

namespace {

struct not_a_stream {
  int get() const { return 0; }  // a get() that gives no cudaStream_t
};

struct big {
  int values[4];
};
void by_reference(const big&) {}  // as a __global__ function taking a parameter by reference

[[maybe_unused]] void misuse(float f, double d) {
  (void)f;
  (void)d;
#if LAUNCHFIT_MISUSE == 1
  (void)lf::fixed({f, 2.0});  // MISUSE 1: floating-point block dimensions
#elif LAUNCHFIT_MISUSE == 2
  (void)lf::max_occupancy().items({d, 16});  // MISUSE 2: floating-point work sizes
#elif LAUNCHFIT_MISUSE == 3
  (void)lf::max_occupancy().on(42);  // MISUSE 3: an integer is no stream
#elif LAUNCHFIT_MISUSE == 4
  (void)lf::max_occupancy().on(not_a_stream{});  // MISUSE 4: get() gives no cudaStream_t
#elif LAUNCHFIT_MISUSE == 5
  constexpr lf::dims negative{-1, 2};  // MISUSE 5: a negative dimension in a constant expression
#elif LAUNCHFIT_MISUSE == 6
  (void)lf::fixed({1, 2, 3, 4});  // MISUSE 6: dims have three components
#elif LAUNCHFIT_MISUSE == 7
  (void)lf::max_occupancy().grid({true, 2});  // MISUSE 7: a bool is no dimension
#elif LAUNCHFIT_MISUSE == 8
  const lf::dims from_extent = lf::extent{64, 64};  // MISUSE 8: a work extent is not a block or grid
#elif LAUNCHFIT_MISUSE == 9
  (void)lf::max_occupancy().on(std::string("stream"));  // MISUSE 9: a stream's name is no stream
#elif LAUNCHFIT_MISUSE == 10
  constexpr lf::dims too_large{std::size_t{1} << 33};  // MISUSE 10: above 2^32 - 1 in a constant expression
#elif LAUNCHFIT_MISUSE == 11
  (void)lf::launch(by_reference, lf::fixed(32, 1), big{});  // MISUSE 11: a kernel cannot read a reference parameter
#elif LAUNCHFIT_MISUSE == 12
  static const auto base = lf::bytes_in_flight(16);
  base.items(100);  // MISUSE 12: a const spec's setter refines a copy, which this drops (base is unchanged)
#elif LAUNCHFIT_MISUSE == 13
  static const lf::spec<std::unique_ptr<const lf::policy>> owned(std::make_unique<lf::max_occupancy_policy>());
  (void)owned.items(100);  // MISUSE 13: a const spec held by unique_ptr [says: this spec's policy cannot be copied]
#elif LAUNCHFIT_MISUSE == 14
  (void)lf::max_occupancy().items(1000.7f);  // MISUSE 14: a floating-point count would be truncated
#elif LAUNCHFIT_MISUSE == 15
  (void)lf::max_occupancy().grid_stride(true);  // MISUSE 15: a bool is no count
#elif LAUNCHFIT_MISUSE == 16
  auto named = lf::max_occupancy();
  named.per_thread(2.5);  // MISUSE 16: a floating-point number of items per thread
#elif LAUNCHFIT_MISUSE == 17
  (void)lf::max_occupancy().grid_stride(1 << 20).waves(1.5).smem(0.5);  // MISUSE 17: floating-point waves and smem
#endif
}

}  // namespace

int main() { return 0; }

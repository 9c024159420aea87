// SPDX-License-Identifier: MIT
// The host-side cost of a launch that hits the plan cache, without a GPU: the plan lookup
// (launchfit::detail::find), the grid arithmetic (launchfit::grid_for), the policy hash every spec computes,
// and building a spec. Target for lookup + grid: <= 25 ns. Also the CPU part of a miss: a policy's choice and
// the validation of its plan.
//
//   plan-lookup-bench [--benchmark_format=json] [--benchmark_min_time=0.01]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"
#include "plan_cache.hpp"
#include "../test_query.hpp"

namespace lf = launchfit;

namespace {

constexpr std::uintptr_t fake_context = 0x7f0000001000;

lf::plan_key key_of(int kernel) {
  const lf::bytes_in_flight_policy policy{lf::bytes_in_flight_params{32, 0}};
  return lf::plan_key{fake_context, static_cast<std::uintptr_t>(0x400000 + 64 * kernel), policy.hash(), 0, 0};
}

// A cache like a real program's: `kernels` plans, each for a 256-thread block, 8 blocks/SM on 132 SMs.
std::vector<lf::plan_key> populate(int kernels) {
  lf::cache().clear();
  std::vector<lf::plan_key> keys;
  for (int k = 0; k < kernels; ++k) {
    const lf::plan_key key = key_of(k);
    lf::detail::find_or_build(key, [&] {
      lf::detail::plan_entry e;
      e.key = key;
      e.plan.block = lf::dims{256, 1, 1};
      e.plan.block_threads = 256;
      e.plan.blocks_per_sm = 8;
      e.plan.sm_count = 132;
      return e;
    });
    keys.push_back(key);
  }
  return keys;
}

// One kernel launched over and over: the thread-local front answers.
void BM_find_hit(benchmark::State& state) {
  const auto keys = populate(64);
  const lf::plan_key key = keys[17];
  for (auto _ : state) {
    const lf::detail::plan_entry* e = lf::detail::find(key);
    benchmark::DoNotOptimize(e);
  }
  if (!lf::detail::find(key)) state.SkipWithError("plan not found");
}
BENCHMARK(BM_find_hit);

// The CPU part of a cache miss: a policy's choice and the validation of its plan, on the tests' H200 query
// with an occupancy oracle that answers instantly (on a GPU each answer is one driver call, ~0.12 us).
lf::query instant_oracle_query() {
  lf::query q = launchfit_test::h200_query();
  q.active_blocks = [](int block, std::size_t) { return std::min(32, 2048 / block); };
  return q;
}

void BM_choose_fixed(benchmark::State& state) {
  const lf::query q = instant_oracle_query();
  const lf::fixed_policy p{lf::fixed_params{256, 0}};
  for (auto _ : state) benchmark::DoNotOptimize(p.choose(q));
}
BENCHMARK(BM_choose_fixed);

void BM_choose_max_occupancy(benchmark::State& state) {
  const lf::query q = instant_oracle_query();
  const lf::max_occupancy_policy p{};
  for (auto _ : state) benchmark::DoNotOptimize(p.choose(q));
}
BENCHMARK(BM_choose_max_occupancy);

void BM_choose_bytes_in_flight(benchmark::State& state) {
  const lf::query q = instant_oracle_query();
  const lf::bytes_in_flight_policy p{lf::bytes_in_flight_params{32, 0}};
  for (auto _ : state) benchmark::DoNotOptimize(p.choose(q));
}
BENCHMARK(BM_choose_bytes_in_flight);

// The hit path of a launch minus the driver call: lookup + grid for the work.
void BM_find_and_grid_items(benchmark::State& state) {
  const auto keys = populate(64);
  const lf::plan_key key = keys[17];
  lf::work w;
  w.kind = lf::work::shape::items;
  w.n = std::uint64_t{1} << 26;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.n);
    const lf::detail::plan_entry* e = lf::detail::find(key);
    const lf::dims g = lf::grid_for(e->plan, w, e->max_grid_x);
    benchmark::DoNotOptimize(g);
  }
}
BENCHMARK(BM_find_and_grid_items);

void BM_find_and_grid_stride(benchmark::State& state) {
  const auto keys = populate(64);
  const lf::plan_key key = keys[17];
  lf::work w;
  w.kind = lf::work::shape::grid_stride;
  w.n = std::uint64_t{1} << 28;
  w.per_thread = 8;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.n);
    const lf::detail::plan_entry* e = lf::detail::find(key);
    const lf::dims g = lf::grid_for(e->plan, w, e->max_grid_x);
    benchmark::DoNotOptimize(g);
  }
}
BENCHMARK(BM_find_and_grid_stride);

// Several kernels launched in turn (a program's inner loop over 8 kernels): still front hits.
void BM_find_rotating_8(benchmark::State& state) {
  const auto keys = populate(64);
  std::size_t i = 0;
  for (auto _ : state) {
    const lf::detail::plan_entry* e = lf::detail::find(keys[i]);
    benchmark::DoNotOptimize(e);
    i = (i + 1) & 7;
  }
}
BENCHMARK(BM_find_rotating_8);

// The PFR-derived hash of a policy with parameters (part of every cache key, computed per launch).
void BM_policy_hash(benchmark::State& state) {
  const lf::bytes_in_flight_policy policy{lf::bytes_in_flight_params{32, 0}};
  for (auto _ : state) {
    benchmark::DoNotOptimize(policy.hash());
  }
}
BENCHMARK(BM_policy_hash);

void BM_policy_construct_and_hash(benchmark::State& state) {
  int per_thread = 32;
  for (auto _ : state) {
    benchmark::DoNotOptimize(per_thread);
    const lf::bytes_in_flight_policy policy{lf::bytes_in_flight_params{per_thread, 0}};
    benchmark::DoNotOptimize(policy.hash());
  }
}
BENCHMARK(BM_policy_construct_and_hash);

// What a drop-in call builds before launching: max_occupancy().items(n).
void BM_spec_max_occupancy_items(benchmark::State& state) {
  std::uint64_t n = std::uint64_t{1} << 24;
  for (auto _ : state) {
    benchmark::DoNotOptimize(n);
    auto s = lf::max_occupancy().items(n);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_spec_max_occupancy_items);

void BM_spec_bytes_in_flight_grid_stride(benchmark::State& state) {
  std::uint64_t n = std::uint64_t{1} << 28;
  for (auto _ : state) {
    benchmark::DoNotOptimize(n);
    auto s = lf::bytes_in_flight(32).grid_stride(n).per_thread(8);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_spec_bytes_in_flight_grid_stride);

// Everything launch() does on a hit before the driver call: spec, request (policy hash, size bucket), lookup,
// grid.
void BM_spec_request_find_grid(benchmark::State& state) {
  const auto keys = populate(64);
  const lf::plan_key key = keys[17];
  std::uint64_t n = std::uint64_t{1} << 28;
  if (!lf::detail::find(key)) state.SkipWithError("plan not found");
  for (auto _ : state) {
    benchmark::DoNotOptimize(n);
    const auto s = lf::bytes_in_flight(32).grid_stride(n).per_thread(8);
    const lf::detail::launch_request r = lf::detail::make_request(s);
    const lf::plan_key k{key.context, key.kernel, r.policy_hash, r.options.smem_identity(), r.bucket};
    const lf::detail::plan_entry* e = lf::detail::find(k);
    const lf::dims g = lf::grid_for(e->plan, r.shape, e->max_grid_x);
    benchmark::DoNotOptimize(g);
  }
}
BENCHMARK(BM_spec_request_find_grid);

}  // namespace

BENCHMARK_MAIN();

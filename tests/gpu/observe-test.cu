// SPDX-License-Identifier: MIT
// Listeners and NVTX on real launches: one event per new plan (none for warm launches), "tuned" for a
// tuning policy, a listener that launches the same kernel or throws, and launches with NVTX on and off.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/observe.hpp"
#include "launchfit/plugin.hpp"

namespace lf = launchfit;

namespace {

__global__ void observed_add(int* data, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += v;
}

struct device_ints {
  int* p = nullptr;
  int n = 0;
  explicit device_ints(int count) : n(count) {
    if (cudaMalloc(&p, sizeof(int) * n) == cudaSuccess) cudaMemset(p, 0, sizeof(int) * n);
  }
  ~device_ints() { cudaFree(p); }
  std::vector<int> host() const {
    std::vector<int> h(static_cast<std::size_t>(n));
    cudaMemcpy(h.data(), p, sizeof(int) * n, cudaMemcpyDeviceToHost);
    return h;
  }
};

struct recorder {
  std::mutex m;
  std::vector<lf::plan_event> events;
  std::vector<lf::plan> plans;
  std::uint64_t id = 0;
  recorder() {
    id = lf::add_plan_listener([this](const lf::plan_event& ev) {
      std::lock_guard<std::mutex> lock(m);
      events.push_back(ev);
      plans.push_back(*ev.plan);
      events.back().plan = nullptr;  // valid during the call only
    });
  }
  ~recorder() { lf::remove_plan_listener(id); }
  std::size_t count_for(const std::string& part) {
    std::lock_guard<std::mutex> lock(m);
    std::size_t c = 0;
    for (const auto& e : events) c += e.kernel.find(part) != std::string::npos;
    return c;
  }
};

}  // namespace

TEST(Observe, OneEventPerNewPlanAndNoneForWarmLaunches) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  lf::cache().clear();
  recorder rec;
  device_ints d(4096);
  for (int i = 0; i < 50; ++i) lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);
  lf::launch(observed_add, lf::fixed(128).items(d.n), d.p, d.n, 1);  // another policy: another plan
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int v : d.host()) ASSERT_EQ(v, 51);
  ASSERT_EQ(rec.count_for("observed_add"), 2u);
  std::lock_guard<std::mutex> lock(rec.m);
  EXPECT_EQ(rec.events[0].what, lf::plan_event::kind::new_plan);
  EXPECT_NE(rec.events[0].device.find("NVIDIA"), std::string::npos) << rec.events[0].device;
  EXPECT_EQ(rec.plans[1].block_threads, 128);
  EXPECT_EQ(rec.events[0].first_work.n, 4096u);
}

TEST(Observe, ATuningResultIsATunedEvent) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  const std::string plugin = LAUNCHFIT_AUTOTUNE_PLUGIN;
#else
  const std::string plugin = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../../plugins/liblaunchfit-autotune.so";
#endif
  try {
    lf::load_plugin(plugin);
  } catch (const lf::error& e) {
    if (std::string(e.what()).find("already") == std::string::npos) FAIL() << e.what();
  }
  lf::cache().clear();
  recorder rec;
  device_ints d(1 << 20);
  lf::launch(observed_add, lf::use("autotune(max_trials=8)").items(d.n).rerunnable(), d.p, d.n, 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::lock_guard<std::mutex> lock(rec.m);
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].what, lf::plan_event::kind::tuned);
  EXPECT_GT(rec.plans[0].trials, 0);
}

TEST(Observe, AListenerThatLaunchesOrThrowsNeitherDeadlocksNorStopsTheLaunch) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  lf::cache().clear();
  device_ints d(1024);
  std::atomic<int> inside{0};
  const auto launcher = lf::add_plan_listener([&](const lf::plan_event& ev) {
    if (ev.kernel.find("observed_add") == std::string::npos || inside.fetch_add(1) > 0) return;
    lf::launch(observed_add, lf::bytes_in_flight(4).items(d.n), d.p, d.n, 10);  // its own plan, from inside
  });
  const auto thrower = lf::add_plan_listener([](const lf::plan_event&) { throw 42; });
  lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  lf::remove_plan_listener(launcher);
  lf::remove_plan_listener(thrower);
  for (int v : d.host()) ASSERT_EQ(v, 11);
}

TEST(Observe, LaunchesRunWithNvtxOnAndOff) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  device_ints d(2048);
  lf::cache().clear();
  lf::set_nvtx(true);
  lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);
  lf::set_nvtx(false);
  lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);  // planned with NVTX on: no range now
  lf::cache().clear();
  lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);  // planned with NVTX off
  lf::set_nvtx(true);
  lf::launch(observed_add, lf::max_occupancy().items(d.n), d.p, d.n, 1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int v : d.host()) ASSERT_EQ(v, 4);
}

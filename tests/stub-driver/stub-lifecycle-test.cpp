// SPDX-License-Identifier: MIT
// CUDA graphs and the process's life, through the stub driver (stub_driver.h): a process that ends with
// launches captured into graphs still alive (their records, copied arguments and policies pending) ends at
// once and cleanly; children forked while another thread captures, tunes and destroys graphs (the captures'
// lock and the graph's destroy callback taken at any moment) log and end. (A forked child may not use CUDA
// itself, so the children here make no driver call.) Each child is bounded in time.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "fault/bounded.hpp"
#include "fault/forked_child.hpp"
#include "launchfit/error.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/plugin.hpp"
#include "stub_driver.h"

extern "C" CUresult CUDAAPI cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

namespace lf = launchfit;
using namespace std::chrono_literals;

using launchfit::fault::in_forked_child;

namespace {

using launchfit::fault::sanitized;
using launchfit::fault::slow_factor;

const std::size_t map_params[] = {sizeof(void*), sizeof(void*), sizeof(int)};
float* device_pointer(std::uintptr_t n) { return reinterpret_cast<float*>(n); }

bool load_autotune() {
#ifdef LAUNCHFIT_AUTOTUNE_PLUGIN
  try {
    return lf::load_plugin(LAUNCHFIT_AUTOTUNE_PLUGIN).name == "autotune";
  } catch (const lf::error&) {
    return false;
  }
#else
  return false;
#endif
}

// One autotuned launch of `f` captured on `s` into a new graph; the graph.
CUgraph capture(CUfunction f, CUstream s, int n) {
  launchfit_stub_begin_capture(s);
  lf::launch(lf::kernel(f), lf::use("autotune(max_trials=8)").items(n).on(s).rerunnable(), device_pointer(0x1000),
             device_pointer(0x2000), n);
  return launchfit_stub_end_capture(s);
}

lf::graph_tuning tune(CUgraph g, CUgraphExec exec, CUstream s) {
  return lf::tune_graph(reinterpret_cast<cudaGraph_t>(g), reinterpret_cast<cudaGraphExec_t>(exec),
                        reinterpret_cast<cudaStream_t>(s));
}

// 20 children forked one after another while a worker thread runs (with a sanitizer the worker is paused between
// two of its rounds for each fork): each logs through launchfit and ends within its bound.
void fork_children_that_log(std::atomic<bool>& pause, const std::atomic<bool>& parked) {
  constexpr int forks = 20;
  for (int i = 0; i < forks; ++i) {
    if (sanitized) {
      // GCC 12's sanitizer allocator has no fork handlers: the worker stops between two rounds for the fork.
      pause = true;
      while (!parked) std::this_thread::yield();
    }
    const auto r = lf::fault::run_bounded(5000ms * slow_factor, [i] {
      in_forked_child = true;
      lf::logger()->info("forked child {} ends", i);
      std::exit(0);
      return 1;
    });
    pause = false;
    EXPECT_TRUE(r.finished) << "child " << i << " hung";
    EXPECT_EQ(r.exit_code, 0) << "child " << i << ", signal " << r.signal;
    if (!r.finished || r.exit_code != 0) break;
  }
}

// First in this file: forked before this process has started any thread of launchfit's.
TEST(StubLifecycle, AProcessEndsAtOnceWithCapturedLaunchesPending) {
  const auto r = lf::fault::run_bounded(10000ms * slow_factor, [] {
    if (!load_autotune()) return 2;
    const auto started = std::chrono::steady_clock::now();
    for (int k = 0; k < 8; ++k) {
      const std::string name = "_Z7pending" + std::to_string(k) + "PKfPfi";
      const CUfunction f = launchfit_stub_function(name.c_str(), 16, 0, 1024, map_params, 3);
      const CUstream s = reinterpret_cast<CUstream>(std::uintptr_t{0x100 + static_cast<unsigned>(k)});
      for (int i = 0; i < 25; ++i) {
        const CUgraph g = capture(f, s, 1 << (10 + i % 8));
        const CUgraphExec exec = launchfit_stub_instantiate(g);
        // Half the graphs are destroyed (their records go with them), half stay alive to the end.
        if (i % 2) {
          launchfit_stub_destroy_exec(exec);
          launchfit_stub_destroy_graph(g);
        }
      }
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "200 captures in %.3f s\n", took);
    std::exit(0);  // records of 100 graphs alive pending: an ordinary end
    return 1;
  });
  EXPECT_TRUE(r.finished) << "the process did not end within the bound";
  EXPECT_EQ(r.exit_code, 0) << "signal " << r.signal;
}

// Another thread keeps capturing, tuning and destroying graphs (taking the captures' lock, calling the user
// object's destroy callback) while this one forks: each child logs through launchfit and ends.
TEST(StubLifecycle, ChildrenForkedWhileAThreadCapturesLogAndEnd) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot follow the threads a forked child of a multithreaded process starts";
#endif
  ASSERT_TRUE(load_autotune()) << "the autotune plugin of this build did not load";
  const CUfunction busy = launchfit_stub_function("_Z4busyPKfPfi", 16, 0, 1024, map_params, 3);
  launchfit_stub_set_cost(busy, 0.01, 128);
  std::atomic<bool> stop{false}, pause{false}, parked{false};
  std::atomic<int> rounds{0};
  std::thread worker([&] {
    const CUstream s = reinterpret_cast<CUstream>(std::uintptr_t{0x200});
    for (int i = 0; !stop; ++i) {
      if (pause) {  // between two rounds: outside launchfit and the allocator
        parked = true;
        while (pause && !stop) std::this_thread::yield();
        parked = false;
      }
      const CUgraph g = capture(busy, s, 1 << (12 + i % 6));
      const CUgraphExec exec = launchfit_stub_instantiate(g);
      (void)tune(g, exec, reinterpret_cast<CUstream>(std::uintptr_t{0x201}));
      launchfit_stub_destroy_exec(exec);
      launchfit_stub_destroy_graph(g);
      ++rounds;
    }
  });
  while (rounds < 3) std::this_thread::sleep_for(1ms);
  fork_children_that_log(pause, parked);
  stop = true;
  worker.join();
  EXPECT_GT(rounds.load(), 3);
}

// Another thread keeps raising functions' dynamic-smem limits for new plans and giving them back for refused ones
// (the limit registry's lock taken at any moment) while this one forks: each child logs and ends, and the
// parent's limits are what the kept plans need.
TEST(StubLifecycle, ChildrenForkedWhileAThreadRaisesAndGivesBackSmemLimitsLogAndEnd) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot follow the threads a forked child of a multithreaded process starts";
#endif
  const std::size_t axpy_params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};
  std::atomic<bool> stop{false}, pause{false}, parked{false};
  std::atomic<int> rounds{0};
  std::atomic<int> wrong{0};
  const auto limit_of = [](CUfunction f) {
    int v = 0;
    void* get = nullptr;
    if (cuGetProcAddress_v2("cuFuncGetAttribute", &get, CUDA_VERSION, 0, nullptr) != CUDA_SUCCESS) return -1;
    reinterpret_cast<decltype(&cuFuncGetAttribute)>(get)(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f);
    return v;
  };
  std::thread worker([&] {
    const int n = 1 << 16;
    for (int i = 0; !stop; ++i) {
      if (pause) {  // between two rounds: outside launchfit and the allocator
        parked = true;
        while (pause && !stop) std::this_thread::yield();
        parked = false;
      }
      const std::string name = "_Z9smemstorm" + std::to_string(i % 64) + "fPKfPfi";
      const CUfunction f = launchfit_stub_function(name.c_str(), 16, 0, 1024, axpy_params, 4);
      const auto spec = lf::fixed(128).items(n).smem((64 + i % 64) * 1024).cluster({4, 1, 1});
      launchfit_stub_set_cluster_limit(2);  // refused after the raise: the limit is given back
      try {
        lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
        ++wrong;  // a cluster of 4 where 2 co-schedule was launched
      } catch (const lf::error&) {
      }
      launchfit_stub_set_cluster_limit(0);
      if (limit_of(f) != 48 * 1024) ++wrong;  // the refused plan's raise stayed
      lf::launch(lf::kernel(f), spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), n);
      if (limit_of(f) != (64 + i % 64) * 1024) ++wrong;  // a launched plan keeps its raise
      ++rounds;
    }
  });
  while (rounds < 3) std::this_thread::sleep_for(1ms);
  fork_children_that_log(pause, parked);
  stop = true;
  worker.join();
  EXPECT_GT(rounds.load(), 3);
  EXPECT_EQ(wrong.load(), 0) << "limits not as the plans left them, or a refused cluster launched";
}

}  // namespace

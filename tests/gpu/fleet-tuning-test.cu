// SPDX-License-Identifier: MIT
// One tuning per fleet on a real GPU, with a real redis-server:
//
// 1. N processes (LAUNCHFIT_FLEET_PROCESSES, default 8) start at once on one GPU with empty plan files and an
//    empty Redis, each launching the same K autotuned kernels: exactly one process tunes each kernel (the
//    lease), the others launch the static plan and adopt the tuned one, all N end with identical plans, and
//    the trials in all are the tuners' own.
// 2. The store restarts empty (FLUSHDB): N processes with their plan files run no trial and the same plans.
// 3. A tuning beside a process that keeps the GPU busy (another compute process, which NVML reports)
//    publishes nothing to Redis: its plans stay in its local file, provisional.
//
// Every process is this program again (fork + exec, the FleetChild test), so "started at once", "empty
// file" and "another process on the GPU" hold literally. The checks are tests/gpu/fleet_check.hpp's (tested
// on the CPU by tests/fleet-check-test.cpp). Redis: LAUNCHFIT_TEST_REDIS when set, else a redis-server
// (LAUNCHFIT_REDIS_SERVER, or redis-server on PATH) started on 127.0.0.1 and stopped by its PID; skipped with
// the reason when there is none. Figures go to stdout (and LAUNCHFIT_FLEET_JSON when set) for
// tests/bench/fleet-tuning.sh.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../raw_redis.hpp"
#include "fleet_check.hpp"
#include "gpu_test.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/plugin.hpp"
#include "store/kv_scheme.hpp"
#include "test_doubles.hpp"
#include "tuning_lease.hpp"

namespace lf = launchfit;
namespace fs = std::filesystem;
using launchfit_test::fleet_report;

namespace {

constexpr int kernel_count = 4;
constexpr std::size_t items = std::size_t(1) << 24;
constexpr auto child_limit = std::chrono::seconds(120);

// Four kernels of one shape (distinct fingerprints, so four plans and four leases).
template <int K>
__global__ void scale(float* y, const float* x, float a, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + static_cast<float>(K);
}

// A kernel that keeps the SMs busy for about `cycles` clock ticks.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void touch(const std::string& path) { std::ofstream(path) << "1\n"; }

// ---- the children -----------------------------------------------------------------------------------------

template <int K>
lf::launched launch_one(float* y, const float* x) {
  return lf::launch(scale<K>, lf::use("autotune(max_trials=40)").grid_stride(items).rerunnable(), y, x, 2.0f,
                    items);
}

lf::launched launch_kernel(int k, float* y, const float* x) {
  switch (k) {
    case 0:
      return launch_one<0>(y, x);
    case 1:
      return launch_one<1>(y, x);
    case 2:
      return launch_one<2>(y, x);
    default:
      return launch_one<3>(y, x);
  }
}

std::string plan_text(const lf::plan& p) {
  return std::to_string(p.block.x) + "x" + std::to_string(p.block.y) + "/" + std::to_string(p.blocks_per_sm) +
         (p.full_grid ? "+full" : "");
}

// Whether this process timed the plan's trials (a plan read from a store or adopted carries the tuner's
// count).
bool tuned_here(const lf::plan& p) {
  return p.trials > 0 && p.match.rfind("remote", 0) != 0 && p.match.rfind("cache-file", 0) != 0;
}

int run_tuning_child(const std::string& out_path, const std::string& ready, const std::string& go) {
  if (cudaFree(nullptr) != cudaSuccess) return 2;  // the context first: every child then starts at once
  float *x = nullptr, *y = nullptr;
  if (cudaMalloc(&x, items * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&y, items * sizeof(float)) != cudaSuccess)
    return 2;
  cudaMemset(x, 0, items * sizeof(float));
  cudaDeviceSynchronize();
  touch(ready);
  if (!wait_for_file(go, std::chrono::seconds(60))) return 3;
  std::ostringstream out;
  const auto end = std::chrono::steady_clock::now() + child_limit;
  for (int k = 0; k < kernel_count; ++k) {
    long long static_launches = 0;
    for (;;) {
      const lf::launched l = launch_kernel(k, y, x);
      const lf::plan& p = l.plan();
      if (p.match != launchfit::detail::plan_match::waiting) {
        out << "kernel=" << k << " trials=" << (tuned_here(p) ? p.trials : 0) << " plan=" << plan_text(p)
            << " static=" << static_launches << " match=" << p.match << "\n";
        std::fprintf(stderr, "kernel %d: %s (%s)\n", k, plan_text(p).c_str(), p.reason.c_str());
        break;
      }
      ++static_launches;  // an application goes on working with the static plan
      if (std::chrono::steady_clock::now() > end) return 4;
      cudaDeviceSynchronize();
      // Gently: a waiter's launches must not make the tuner's GPU busy (NVML's samples: under 10% each).
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  cudaDeviceSynchronize();
  std::ofstream(out_path) << out.str();
  return 0;  // a normal exit writes the plan file and the queued remote writes
}

int run_busy_child(const std::string& ready, const std::string& stop) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 2;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess || khz <= 0) khz = 1500000;
  const long long cycles = static_cast<long long>(khz) * 20;  // ~20 ms a launch
  spin<<<prop.multiProcessorCount * 2, 256>>>(cycles);
  cudaDeviceSynchronize();
  touch(ready);
  const auto end = std::chrono::steady_clock::now() + child_limit;
  while (!fs::exists(stop) && std::chrono::steady_clock::now() < end) {
    spin<<<prop.multiProcessorCount * 2, 256>>>(cycles);
    cudaDeviceSynchronize();
  }
  return 0;
}

// ---- the parent -------------------------------------------------------------------------------------------

struct child {
  pid_t pid = -1;
  std::string out;
};

// Starts this program as a child in `mode` with `vars` set (fork + exec: no CUDA across a fork).
child start_child(const std::string& mode, const std::vector<std::pair<std::string, std::string>>& vars,
                  const std::string& out) {
  child c;
  c.out = out;
  c.pid = ::fork();
  if (c.pid == 0) {
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
    ::setenv("LAUNCHFIT_FLEET_CHILD", mode.c_str(), 1);
    ::setenv("LAUNCHFIT_FLEET_OUT", out.c_str(), 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0 && !env("LAUNCHFIT_FLEET_VERBOSE")) ::dup2(devnull, 1);
    ::execl("/proc/self/exe", "fleet-tuning-child", "--gtest_filter=FleetChild.Run", nullptr);
    ::_exit(127);
  }
  return c;
}

// Waits for a child (killing it after the limit); its exit status, -1 when killed.
int finish(const child& c) {
  const auto end = std::chrono::steady_clock::now() + child_limit + std::chrono::seconds(30);
  int status = 0;
  while (::waitpid(c.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<fleet_report> read_reports(int process, const std::string& path, std::string& bad) {
  std::vector<fleet_report> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (auto r = launchfit_test::parse_fleet_report(process, line)) {
      out.push_back(*r);
    } else {
      bad += "process " + std::to_string(process) + ": '" + line + "'; ";
    }
  }
  return out;
}

// A redis-server of the test's own (or the one LAUNCHFIT_TEST_REDIS names).
// A server the test shares (LAUNCHFIT_TEST_REDIS) is used in database 9 alone, so that FLUSHDB empties this
// test's store and nothing of another test's.
struct redis_server {
  pid_t pid = -1;
  std::string host = "127.0.0.1";
  int port = 0;
  int db = 0;
  std::string url, why;

  bool start() {
    if (const char* v = env("LAUNCHFIT_TEST_REDIS")) {
      std::string problem;
      const auto u = launchfit::detail::parse_remote_url(v, problem);
      if (!u) {
        why = "LAUNCHFIT_TEST_REDIS: " + problem;
        return false;
      }
      host = u->host;
      port = u->port;
      db = 9;
      url = "redis://" + host + ":" + std::to_string(port) + "/9";
      return ping();
    }
    const std::string server = env("LAUNCHFIT_REDIS_SERVER") ? env("LAUNCHFIT_REDIS_SERVER") : "redis-server";
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = 20000 + static_cast<int>((::getpid() * 7919 + attempt * 104729) % 40000);
      pid = ::fork();
      if (pid == 0) {
        const int devnull = ::open("/dev/null", O_WRONLY);
        if (devnull >= 0) ::dup2(devnull, 1);
        const std::string p = std::to_string(port);
        ::execlp(server.c_str(), server.c_str(), "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning", nullptr);
        ::_exit(127);
      }
      for (int i = 0; i < 100; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;  // exited: port taken or no server
        if (ping()) {
          url = "redis://127.0.0.1:" + std::to_string(port);
          return true;
        }
      }
      stop();
    }
    why = "no redis-server could be started (" + server +
          "; set LAUNCHFIT_REDIS_SERVER or LAUNCHFIT_TEST_REDIS)";
    return false;
  }
  bool ping() {
    launchfit_test::raw_redis r(host, port, db);
    return r.command({"PING"}).text == "PONG";
  }
  // The store restarts empty.
  void flush() { launchfit_test::raw_redis(host, port, db).command({"FLUSHDB"}); }
  std::size_t plan_keys() {
    launchfit_test::raw_redis r(host, port, db);
    std::size_t n = 0;
    std::string cursor = "0";
    do {
      const auto page = r.command(
          {"SCAN", cursor, "MATCH", std::string(launchfit::detail::remote_key_base) + "*", "COUNT", "1000"});
      if (page.elements.size() != 2) break;
      cursor = page.elements[0].text;
      n += page.elements[1].elements.size();
    } while (cursor != "0");
    return n;
  }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~redis_server() { stop(); }
};

int fleet_processes() {
  const char* v = env("LAUNCHFIT_FLEET_PROCESSES");
  const int n = v ? std::atoi(v) : 8;
  return n >= 2 && n <= 64 ? n : 8;
}

class FleetTuning : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    if (!fs::exists(launchfit_test::autotune_plugin_path()))
      GTEST_SKIP() << "the autotune plugin is not built (" << launchfit_test::autotune_plugin_path() << ")";
    if (!redis_.start()) GTEST_SKIP() << redis_.why;
    dir_ = fs::temp_directory_path() / ("launchfit-fleet-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    redis_.flush();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs n tuning children at once (plan files plans-<i>.json kept across phases); their reports.
  std::vector<fleet_report> run_fleet(int n, const std::string& phase, std::string& problems) {
    const std::string go = (dir_ / (phase + ".go")).string();
    std::vector<child> children;
    for (int i = 0; i < n; ++i) {
      const std::string ready = (dir_ / (phase + ".ready" + std::to_string(i))).string();
      children.push_back(
          start_child("tune",
                      {{"LAUNCHFIT_CACHE", (dir_ / ("plans-" + std::to_string(i) + ".json")).string()},
                       {"LAUNCHFIT_REMOTE", redis_.url},
                       {"LAUNCHFIT_PLUGINS", launchfit_test::autotune_plugin_path()},
                       {"LAUNCHFIT_FLEET_READY", ready},
                       {"LAUNCHFIT_FLEET_GO", go}},
                      (dir_ / (phase + ".out" + std::to_string(i))).string()));
    }
    for (int i = 0; i < n; ++i)
      if (!wait_for_file((dir_ / (phase + ".ready" + std::to_string(i))).string(), std::chrono::seconds(60)))
        problems += "child " + std::to_string(i) + " never got ready; ";
    touch(go);  // all at once
    std::vector<fleet_report> reports;
    for (int i = 0; i < n; ++i) {
      const int rc = finish(children[static_cast<std::size_t>(i)]);
      if (rc != 0) problems += "child " + std::to_string(i) + " exited " + std::to_string(rc) + "; ";
      const auto r = read_reports(i, children[static_cast<std::size_t>(i)].out, problems);
      reports.insert(reports.end(), r.begin(), r.end());
    }
    return reports;
  }

  redis_server redis_;
  fs::path dir_;
};

long long static_launches(const std::vector<fleet_report>& reports) {
  long long n = 0;
  for (const auto& r : reports) n += r.static_launches;
  return n;
}

}  // namespace

// The child's body: skipped unless this program runs as a child of the tests below.
TEST(FleetChild, Run) {
  const char* mode = env("LAUNCHFIT_FLEET_CHILD");
  if (!mode) GTEST_SKIP() << "runs only as a child of FleetTuning";
  const std::string out = env("LAUNCHFIT_FLEET_OUT") ? env("LAUNCHFIT_FLEET_OUT") : "";
  const std::string ready = env("LAUNCHFIT_FLEET_READY") ? env("LAUNCHFIT_FLEET_READY") : "";
  int rc = 1;
  if (std::string(mode) == "busy") {
    rc = run_busy_child(ready, env("LAUNCHFIT_FLEET_STOP") ? env("LAUNCHFIT_FLEET_STOP") : "");
  } else {
    rc = run_tuning_child(out, ready, env("LAUNCHFIT_FLEET_GO") ? env("LAUNCHFIT_FLEET_GO") : "");
  }
  std::fflush(nullptr);
  std::exit(rc);  // a normal exit: the plan file and the remote writes are flushed
}

TEST_F(FleetTuning, OneTunerPerKernelThenFilesServeAnEmptyStore) {
  const int n = fleet_processes();
  std::string problems;
  const auto first = run_fleet(n, "start", problems);
  EXPECT_EQ(problems, "");
  const auto v = launchfit_test::check_one_tuner_per_kernel(first, n, kernel_count);
  EXPECT_TRUE(v.ok) << v.why;
  std::printf(
      "fleet-tuning: %d processes x %d kernels started at once, empty store: %d tuners, %lld trials in "
      "all, %lld static launches while waiting, plans identical: %s\n",
      n, kernel_count, v.tuners, v.total_trials, static_launches(first), v.ok ? "yes" : "no");

  redis_.flush();  // the store restarts empty
  problems.clear();
  const auto second = run_fleet(n, "restart", problems);
  EXPECT_EQ(problems, "");
  const auto w = launchfit_test::check_no_trials_with_files(second, n, kernel_count, first);
  EXPECT_TRUE(w.ok) << w.why;
  std::printf("fleet-tuning: after an empty restart, %d processes with their files: %lld trials in all\n", n,
              w.total_trials);
  if (const char* json = env("LAUNCHFIT_FLEET_JSON")) {
    std::ofstream(json) << "{\"processes\": " << n << ", \"kernels\": " << kernel_count
                        << ", \"tuners\": " << v.tuners << ", \"trials\": " << v.total_trials
                        << ", \"static_launches\": " << static_launches(first)
                        << ", \"identical\": " << (v.ok ? "true" : "false")
                        << ", \"trials_after_restart\": " << w.total_trials << "}\n";
  }
}

TEST_F(FleetTuning, ATuningBesideABusyGpuPublishesNothing) {
  const std::string busy_ready = (dir_ / "busy.ready").string(), stop = (dir_ / "busy.stop").string();
  const child busy =
      start_child("busy", {{"LAUNCHFIT_FLEET_READY", busy_ready}, {"LAUNCHFIT_FLEET_STOP", stop}},
                  (dir_ / "busy.out").string());
  ASSERT_TRUE(wait_for_file(busy_ready, std::chrono::seconds(60))) << "the busy process never started";
  std::string problems;
  const auto reports = run_fleet(1, "busy-tune", problems);
  touch(stop);
  EXPECT_EQ(finish(busy), 0);
  EXPECT_EQ(problems, "");
  long long trials = 0;
  for (const auto& r : reports) trials += r.trials;
  EXPECT_GT(trials, 0) << "the process beside the busy one did not tune";
  EXPECT_EQ(redis_.plan_keys(), 0u) << "a plan measured beside another process was published";
  // Kept locally, provisional: its plan file holds them.
  EXPECT_TRUE(fs::exists(dir_ / "plans-0.json"));
  std::printf("fleet-tuning: a tuning beside a busy GPU: %lld trials, %zu plans published\n", trials,
              redis_.plan_keys());
}

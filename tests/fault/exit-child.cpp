// SPDX-License-Identifier: MIT
// A program that stores plans and then ends the way real programs end: returning from main, exit(),
// an exception out of main, quick_exit(), _exit(). exit-test.cpp runs it many times and reads what it left
// in its plan file and in Redis.
//
//   exit-child <how> <pending> <file|-> <redis-url|-> <fork:0|1> <tag>
//
// It stores `flushed_plans` plans and flushes them (those must survive every way of ending), then
// `pending` more that it does not flush, and ends by `how`: return, exit, throw, quick_exit, _exit. With
// fork 1 a parent process opens the stores, stores and flushes one plan (its background thread runs),
// forks, and the child does the above; the parent exits with the child's status. With
// LAUNCHFIT_TEST_SLOW_FSYNC_MS set, every fsync() after the flush takes that long (a filesystem that hangs),
// and the background thread is given 500 ms to start writing the pending plans before the program ends (none
// with LAUNCHFIT_TEST_EXIT_AT_ONCE also set). With
// LAUNCHFIT_TEST_LATE_STORES=N, after the flush it makes <file>.flushed and waits for <file>.locked (a peer then
// holds the file's lock), and a static object stores N more plans from its destructor, after launchfit's exit
// drain.

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "cache_file.hpp"
#include "launchfit/cache.hpp"

namespace lf = launchfit;

namespace {
std::atomic<bool> fsync_slow{false};
std::string late_tag;  // set by main: the destructor below stores plans of this tag

void store(const std::string& tag, int from, int count);

// Made before main, so destroyed after launchfit's exit drain (registered at its first use).
struct stores_when_destroyed {
  ~stores_when_destroyed() {
    if (const char* n = std::getenv("LAUNCHFIT_TEST_LATE_STORES")) store(late_tag, 2000000, std::atoi(n));
  }
} late_stores;
}  // namespace

// The plan file's writer calls this fsync (the program's own definition comes before libc's).
extern "C" int fsync(int fd) {
  if (fsync_slow.load()) {
    if (const char* ms = std::getenv("LAUNCHFIT_TEST_SLOW_FSYNC_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  }
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

namespace {

constexpr int flushed_plans = 10;

lf::stored_key key(const std::string& tag, int i) {
  lf::stored_key k;
  k.device_uuid = "GPU-" + tag + "-0000";
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = lf::kernel_fingerprint(
      lf::kernel_resources::manual(32, 0, 1024, "_Z4exit" + tag + "_" + std::to_string(i) + "Pf"));
  k.policy = "max_occupancy(prefer_block=256,block_limit=0)";
  k.smem_rule = "bytes=0";
  k.device_name = "Exit GPU " + tag;  // a device model of its own: Redis keys no other run shares
  k.l2_bytes = 62914560;
  return k;
}

lf::plan sample_plan(int i) {
  const unsigned block = 32u << (i % 6);
  lf::plan p;
  p.block = lf::dims{block, 1, 1};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = static_cast<int>(std::min(2048u / block, 32u));
  p.sm_count = 132;
  p.policy = "max_occupancy(prefer_block=256,block_limit=0)";
  p.reason = "exit test plan " + std::to_string(i);
  return p;
}

void store(const std::string& tag, int from, int count) {
  for (int i = from; i < from + count; ++i) lf::store_plan(key(tag, i), sample_plan(i));
}

bool flush_all(bool file, bool redis) {
  bool ok = true;
  if (file) ok = lf::flush_cache_file(10000) && ok;
  if (redis) ok = lf::flush_remote_store(10000) && ok;
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: exit-child <how> <pending> <file|-> <redis-url|-> <fork:0|1> <tag>\n");
    return 2;
  }
  const std::string how = argv[1];
  const int pending = std::atoi(argv[2]);
  const std::string file = argv[3], redis = argv[4], tag = argv[6];
  const bool fork_first = std::strcmp(argv[5], "1") == 0;
  const bool use_file = file != "-", use_redis = redis != "-";
  if (use_file) lf::set_cache_file(file);
  if (use_redis) lf::set_remote_store(redis);

  if (fork_first) {
    // The parent's background thread has run (and may be running) when the child is made.
    store(tag, 1000000, 1);
    if (!flush_all(use_file, use_redis)) return 5;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    // Pending in the parent at the fork: its background thread may be writing them as the fork happens.
    // Not under GCC 12's sanitizers, whose allocator has no fork handlers: a child forked while that thread
    // allocates could hang in it, which is not what this program is about (tests/sanitize.sh).
    store(tag, 1000001, 3);
#else
    // Under them the background thread is let finish what the flush gave it (its buffers freed) and go idle,
    // so that no thread is inside the allocator at the fork.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
#endif
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child < 0) return 6;
    if (child > 0) {
      int status = 0;
      if (waitpid(child, &status, 0) != child) _exit(7);
      if (WIFSIGNALED(status)) _exit(128 + WTERMSIG(status));
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 8);
    }
  }

  store(tag, 0, flushed_plans);
  if (!flush_all(use_file, use_redis)) return 4;  // every plan so far is written
  fsync_slow = true;
  if (std::getenv("LAUNCHFIT_TEST_LATE_STORES")) {
    late_tag = tag;
    std::FILE* made = std::fopen((file + ".flushed").c_str(), "w");
    if (made) std::fclose(made);
    for (int i = 0; i < 2000 && access((file + ".locked").c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  store(tag, flushed_plans, pending);
  // With a hung fsync, the background thread is let start writing the pending plans (and hang in it) first,
  // unless LAUNCHFIT_TEST_EXIT_AT_ONCE is set: then the program ends before the writer's batch is due, and the
  // exit's drain finds the write not under way.
  if (std::getenv("LAUNCHFIT_TEST_SLOW_FSYNC_MS") && !std::getenv("LAUNCHFIT_TEST_EXIT_AT_ONCE"))
    std::this_thread::sleep_for(std::chrono::milliseconds(500));

  if (how == "return") return 0;
  if (how == "exit") std::exit(0);
  if (how == "throw") throw std::runtime_error("out of main");  // std::terminate: abort()
  if (how == "quick_exit") std::quick_exit(0);
  if (how == "_exit") _exit(0);
  return 3;
}

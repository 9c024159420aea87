// SPDX-License-Identifier: MIT
// Every way a program ends, with plans pending: exit-child returns from main, calls exit(), throws out of
// main, calls quick_exit() or _exit(), with 0, 1, 100 and 10,000 plans not yet written, into a plan file
// (fresh or holding another program's plans), into Redis, or both, from the first process or from a child
// of fork(). Whatever the way, the file parses and holds every plan flushed before the exit began (a normal
// exit: every plan), and every value in Redis is a valid plan. Each combination runs LAUNCHFIT_EXIT_REPS
// times (20 by default), those with 10,000 pending plans LAUNCHFIT_EXIT_REPS_LARGE times (2 by default: one
// such process takes about 1 s on the 2-core CI host; tests/bench/exit-storm.sh runs them 20 times), four
// processes at once.
//
// Redis: the server of LAUNCHFIT_TEST_REDIS, database 9 (emptied first; no other test writes there).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache_file.hpp"
#include "fault/bounded.hpp"
#include "raw_redis.hpp"

extern char** environ;

namespace lf = launchfit;
namespace fs = std::filesystem;

namespace {

constexpr int flushed_plans = 10;  // as exit-child.cpp
constexpr int redis_db = 9;

using launchfit::fault::sanitized;

struct run_spec {
  std::string how;
  int pending = 0;
  bool file = false, redis = false, existing = false, forked = false;
  bool retried = false;  // run again after a hang under a sanitizer
  std::string tag;
  fs::path path;

  std::string name() const {
    return how + " pending=" + std::to_string(pending) +
           (file ? existing ? " file(existing)" : " file" : "") + (redis ? " redis" : "") +
           (forked ? " after-fork" : "");
  }
  bool normal_exit() const { return how == "return" || how == "exit"; }
};

struct redis_target {
  std::string host;
  int port = 0;
  std::string url;  // with the database
};

std::optional<redis_target> test_redis() {
  const char* v = std::getenv("LAUNCHFIT_TEST_REDIS");
  if (!v || std::strncmp(v, "redis://", 8) != 0) return std::nullopt;
  std::string hp = std::string(v + 8);
  if (const auto slash = hp.find('/'); slash != std::string::npos) hp.resize(slash);
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  redis_target t;
  t.host = hp.substr(0, colon);
  t.port = std::atoi(hp.c_str() + colon + 1);
  t.url = "redis://" + hp + "/" + std::to_string(redis_db);
  return t;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Another program's plans, already in the file.
void write_existing(const fs::path& p, const std::string& tag) {
  std::vector<lf::detail::stored_entry> entries;
  for (int i = 0; i < 5; ++i) {
    lf::detail::stored_entry e;
    e.key.device_uuid = "GPU-other-" + tag;
    e.key.cc = 90;
    e.key.sm_count = 132;
    e.key.driver_version = 12080;
    e.key.kernel = lf::kernel_fingerprint(
        lf::kernel_resources::manual(32, 0, 1024, "_Z5other" + std::to_string(i) + "Pf"));
    e.key.policy = "max_occupancy(prefer_block=256,block_limit=0)";
    e.key.smem_rule = "bytes=0";
    e.plan.block = lf::dims{128, 1, 1};
    e.plan.block_threads = 128;
    e.plan.blocks_per_sm = 16;
    e.plan.sm_count = 132;
    e.plan.policy = e.key.policy;
    e.plan.reason = "another program's plan";
    e.stored_at_ms = 1700000000000;
    entries.push_back(e);
  }
  std::ofstream(p, std::ios::binary) << lf::detail::serialize_cache_file(entries);
}

// The plan numbers of exit-child's kernels found in `entries`, for this tag.
std::set<int> plan_numbers(const std::vector<lf::detail::stored_entry>& entries, const std::string& tag) {
  std::set<int> out;
  const std::string mark = "_Z4exit" + tag + "_";
  for (const auto& e : entries) {
    const auto at = e.key.kernel.find(mark);
    if (at == std::string::npos) continue;
    out.insert(std::atoi(e.key.kernel.c_str() + at + mark.size()));
  }
  return out;
}

pid_t spawn(const std::string& child, const run_spec& r, const std::optional<redis_target>& redis,
            const fs::path& stderr_to = "/dev/null") {
  const std::string pending = std::to_string(r.pending);
  const std::string file = r.file ? r.path.string() : "-";
  const std::string url = r.redis ? redis->url : "-";
  const char* argv[] = {child.c_str(), r.how.c_str(),        pending.c_str(), file.c_str(),
                        url.c_str(),   r.forked ? "1" : "0", r.tag.c_str(),   nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The throwing child's "terminate called after..." is expected: not in the test's output.
  posix_spawn_file_actions_addopen(&actions, 2, stderr_to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // Its own process group: a run that hangs is killed with the child it forked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  if (posix_spawn(&pid, child.c_str(), &actions, &attr, const_cast<char**>(argv), environ) != 0) pid = -1;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// What the run left: empty when all is as promised.
std::string check(const run_spec& r, int status) {
  std::string problems;
  const int expected_signal = r.how == "throw" ? SIGABRT : 0;
  if (r.forked) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code != (expected_signal ? 128 + expected_signal : 0))
      problems += " exit status " + std::to_string(code) + ";";
  } else if (expected_signal) {
    if (!WIFSIGNALED(status) || WTERMSIG(status) != expected_signal) problems += " not ended by SIGABRT;";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    problems += " exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ";";
  }
  if (!r.file) return problems;
  const auto c = lf::detail::parse_cache_file(slurp(r.path));
  if (c.status != lf::detail::cache_file_status::ok)
    return problems + " the file does not parse: " + c.problem;
  if (c.skipped || c.refused) problems += " the file holds bad entries: " + c.problem + ";";
  const std::set<int> found = plan_numbers(c.entries, r.tag);
  const int must = flushed_plans + (r.normal_exit() ? r.pending : 0);
  for (int i = 0; i < must; ++i) {
    if (!found.count(i)) {
      problems += " plan " + std::to_string(i) + " of " + std::to_string(must) + " missing;";
      break;
    }
  }
  if (r.existing) {
    int others = 0;
    for (const auto& e : c.entries) others += e.key.device_uuid == "GPU-other-" + r.tag;
    if (others != 5) problems += " " + std::to_string(others) + " of another program's 5 plans kept;";
  }
  return problems;
}

int reps(const char* variable, int fallback) {
  const char* v = std::getenv(variable);
  const int n = v ? std::atoi(v) : fallback;
  return n > 0 ? n : fallback;
}

}  // namespace

TEST(Exit, EveryWayOfEndingLeavesEveryFlushedPlanAndNothingTornOrForged) {
  const std::string child = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/exit-child";
  ASSERT_TRUE(fs::exists(child)) << child;
  // The file's entry bound (8,192 by default) would evict the oldest of 10,010 plans by design: raised, so
  // that what is checked is the exit alone.
  setenv("LAUNCHFIT_CACHE_MAX_ENTRIES", "50000", 1);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // the throwing child aborts: no core files

  std::optional<redis_target> redis = test_redis();
  if (redis) {
    launchfit_test::raw_redis db(redis->host, redis->port, redis_db);
    if (!db.connected() || db.command({"FLUSHDB"}).text != "OK") redis.reset();
  }

  const fs::path dir = fs::temp_directory_path() / ("launchfit-exit-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<run_spec> runs;
  int serial = 0;
  const int small_reps = reps("LAUNCHFIT_EXIT_REPS", 20), large_reps = reps("LAUNCHFIT_EXIT_REPS_LARGE", 2);
  for (int rep = 0; rep < std::max(small_reps, large_reps); ++rep) {
    for (const char* how : {"return", "exit", "throw", "quick_exit", "_exit"}) {
      for (const int pending : {0, 1, 100, 10000}) {
        if (rep >= (pending == 10000 ? large_reps : small_reps)) continue;
        for (const bool forked : {false, true}) {
          // file, file (existing), redis, both, both (existing)
          for (int where = 0; where < 5; ++where) {
            run_spec r;
            r.how = how;
            r.pending = pending;
            r.forked = forked;
            r.file = where != 2;
            r.existing = where == 1 || where == 4;
            r.redis = where >= 2;
            if (r.redis && !redis) continue;
            r.tag = std::to_string(::getpid()) + "x" + std::to_string(serial++);
            r.path = dir / ("plans-" + r.tag + ".json");
            runs.push_back(r);
          }
        }
      }
    }
  }
  if (!redis) std::printf("[ NOTE     ] no Redis (LAUNCHFIT_TEST_REDIS): the file runs only\n");

  // Several processes at once: a storm, as a fleet's ranks end together.
  // A run that has not ended within hang_limit is a hang: killed (with what it forked) and named, instead of
  // the whole suite waiting for ctest's timeout.
  const std::size_t parallel = 4;
  const auto hang_limit = std::chrono::seconds(120);
  std::map<pid_t, std::pair<std::size_t, std::chrono::steady_clock::time_point>> running;
  std::vector<std::string> failures;
  std::size_t next = 0;
  const auto start = std::chrono::steady_clock::now();
  while (next < runs.size() || !running.empty()) {
    while (next < runs.size() && running.size() < parallel) {
      run_spec& r = runs[next];
      if (r.existing) write_existing(r.path, r.tag);
      const pid_t pid = spawn(child, r, redis);
      ASSERT_GT(pid, 0) << "cannot start " << child;
      running[pid] = {next++, std::chrono::steady_clock::now()};
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    ASSERT_GE(done, 0);
    if (done == 0) {
      const auto now = std::chrono::steady_clock::now();
      for (auto it = running.begin(); it != running.end();) {
        if (now - it->second.second < hang_limit) {
          ++it;
          continue;
        }
        ::kill(-it->first, SIGKILL);
        ::waitpid(it->first, &status, 0);
        run_spec& r = runs[it->second.first];
        if (sanitized && r.forked && !r.retried) {
          // GCC 12's sanitizer allocator has no fork handlers: a child forked while a thread of its parent is
          // inside it can hang there. Run once more; a second hang is a failure. Without a sanitizer (the
          // test command) every hang is one.
          std::printf("[ NOTE     ] %s hung after its fork under a sanitizer: run again\n", r.name().c_str());
          r.retried = true;
          std::error_code ec;
          fs::remove(r.path, ec);
          runs.push_back(r);
        } else {
          failures.push_back(r.name() + ": did not end within " + std::to_string(hang_limit.count()) +
                             " s (killed)");
        }
        it = running.erase(it);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const auto it = running.find(done);
    if (it == running.end()) continue;
    const run_spec& r = runs[it->second.first];
    running.erase(it);
    if (const std::string p = check(r, status); !p.empty()) failures.push_back(r.name() + ":" + p);
    std::error_code ec;
    fs::remove(r.path, ec);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ NOTE     ] %zu processes in %.1f s\n", runs.size(), seconds);
  fs::remove_all(dir);
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << runs.size() << " runs failed";

  if (!redis) return;
  // Every value written by every run, whatever the way it ended, is a valid plan; every flushed plan is
  // there.
  launchfit_test::raw_redis db(redis->host, redis->port, redis_db);
  std::size_t values = 0, bad = 0;
  std::map<std::string, std::set<int>> per_tag;
  for (const std::string& k : db.keys()) {
    const launchfit_test::redis_reply v = db.command({"GET", k});
    ++values;
    const auto c = lf::detail::parse_cache_file(v.text);
    if (v.type != '$' || c.status != lf::detail::cache_file_status::ok || c.entries.size() != 1 ||
        c.skipped || c.refused) {
      if (++bad <= 5) ADD_FAILURE() << "invalid value under " << k << ": " << v.text.substr(0, 80);
      continue;
    }
    const std::string& name = c.entries[0].key.device_name;
    if (name.rfind("Exit GPU ", 0) == 0) {
      const std::string tag = name.substr(9);
      for (int n : plan_numbers(c.entries, tag)) per_tag[tag].insert(n);
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << values << " values";
  std::size_t short_runs = 0;
  for (const run_spec& r : runs) {
    if (!r.redis) continue;
    const std::set<int>& got = per_tag[r.tag];
    for (int i = 0; i < flushed_plans; ++i) {
      if (!got.count(i)) {
        if (++short_runs <= 5) ADD_FAILURE() << r.name() << ": flushed plan " << i << " not in Redis";
        break;
      }
    }
  }
  EXPECT_EQ(short_runs, 0u);
  std::printf("[ NOTE     ] %zu Redis values, all valid: %s\n", values, bad ? "no" : "yes");
}

// One run of exit-child returning from main with 5 plans pending while every fsync after its flush hangs for
// 60 s; `at_once`: it ends before the writer's batch is due (no write under way at exit). The run's stderr
// goes to <dir>/stderr.txt.
struct hung_fsync_run {
  run_spec r;
  int status = 0;
  double seconds = 0;
  std::string stderr_text;
};
hung_fsync_run run_with_hung_fsync(const fs::path& dir, const std::string& tag, bool at_once) {
  const std::string child = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/exit-child";
  hung_fsync_run out;
  EXPECT_TRUE(fs::exists(child)) << child;
  fs::create_directories(dir);
  run_spec& r = out.r;
  r.how = "return";
  r.pending = 5;
  r.file = true;
  r.tag = std::to_string(::getpid()) + tag;
  r.path = dir / "plans.json";
  setenv("LAUNCHFIT_TEST_SLOW_FSYNC_MS", "60000", 1);
  if (at_once) setenv("LAUNCHFIT_TEST_EXIT_AT_ONCE", "1", 1);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = spawn(child, r, std::nullopt, dir / "stderr.txt");
  unsetenv("LAUNCHFIT_TEST_SLOW_FSYNC_MS");
  unsetenv("LAUNCHFIT_TEST_EXIT_AT_ONCE");
  EXPECT_GT(pid, 0);
  if (pid > 0) EXPECT_EQ(::waitpid(pid, &out.status, 0), pid);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stderr_text = slurp(dir / "stderr.txt");
  return out;
}

// Every plan flushed before the run ended is in its file.
void expect_flushed_plans(const run_spec& r) {
  const auto c = lf::detail::parse_cache_file(slurp(r.path));
  ASSERT_EQ(c.status, lf::detail::cache_file_status::ok) << c.problem;
  EXPECT_EQ(plan_numbers(c.entries, r.tag).size(), static_cast<std::size_t>(flushed_plans));
}

// A plan file on a filesystem that hangs in fsync (the background writer inside one for 60 s as main returns):
// the exit waits for the write under way 10 s at most (it waited up to 30 s), and every plan flushed before is
// in the file.
TEST(Exit, AHungFsyncDoesNotHoldTheExitPastItsBound) {
  const fs::path dir = fs::temp_directory_path() / ("launchfit-exit-fsync-" + std::to_string(::getpid()));
  const hung_fsync_run run = run_with_hung_fsync(dir, "fsync", false);
  std::printf("[ NOTE     ] exit with the writer in a 60 s fsync: %.1f s\n", run.seconds);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.status;
  EXPECT_LT(run.seconds, 25.0) << "the exit waited for the hung write";
  expect_flushed_plans(run.r);
  fs::remove_all(dir);
}

// The same hung fsync where the program ends before the writer's batch is due (plans stored just before main
// returns): the exit's drain hands the write to the idle background thread and waits for it 10 s at most. The
// exiting thread ran the write itself and hung in fsync with it, for the whole 60 s. The warning that names the
// plans not written reaches the log, written by a helper thread while the background thread is in the hung
// write (it was queued behind that write and dropped).
TEST(Exit, AHungFsyncOfAWriteTheExitStartsDoesNotHoldTheExit) {
  const fs::path dir = fs::temp_directory_path() / ("launchfit-exit-fsync-now-" + std::to_string(::getpid()));
  const hung_fsync_run run = run_with_hung_fsync(dir, "fsyncnow", true);
  std::printf("[ NOTE     ] exit starting a write that hangs in fsync for 60 s: %.1f s\n", run.seconds);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.status;
  EXPECT_LT(run.seconds, 40.0) << "the exiting thread ran the hung write itself";
  EXPECT_NE(run.stderr_text.find("5 plan(s) not written at exit: a write of the file did not end within 10 s"),
            std::string::npos)
      << run.stderr_text;
  expect_flushed_plans(run.r);
  fs::remove_all(dir);
}

// Plans stored from a static destructor after the exit's drain gave up on a lock a peer holds: each gets one look
// at the lock, not the drain's wait again (5 such plans took the exit 7 s), and one warning says they were not
// written (they were dropped silently).
TEST(Exit, PlansStoredAfterTheDrainGaveUpCostNoWaitAndAreNamed) {
  const std::string child = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/exit-child";
  ASSERT_TRUE(fs::exists(child)) << child;
  const fs::path dir = fs::temp_directory_path() / ("launchfit-exit-late-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  run_spec r;
  r.how = "return";
  r.pending = 1;
  r.file = true;
  r.tag = std::to_string(::getpid()) + "late";
  r.path = dir / "plans.json";
  const std::string path = r.path.string();
  setenv("LAUNCHFIT_TEST_LATE_STORES", "5", 1);
  const pid_t pid = spawn(child, r, std::nullopt, dir / "stderr.txt");
  unsetenv("LAUNCHFIT_TEST_LATE_STORES");
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 2000 && !fs::exists(path + ".flushed"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(path + ".flushed"));
  const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  { std::ofstream(path + ".locked") << "held"; }
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(lock);
  std::printf("[ NOTE     ] exit with 5 plans stored after the drain, the lock held: %.1f s\n", seconds);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(seconds, 5.0) << "each late plan waited for the lock";
  const std::string err = slurp(dir / "stderr.txt");
  EXPECT_NE(err.find("not written at exit"), std::string::npos) << err;
  EXPECT_NE(err.find("stored after the exit's drain not written"), std::string::npos) << err;
  fs::remove_all(dir);
}

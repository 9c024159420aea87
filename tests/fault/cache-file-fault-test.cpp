// SPDX-License-Identifier: MIT
// The plan-cache file under faults: a peer holding the lock, processes killed mid-write, special files,
// symbolic links, leftover temp files, oversized files. Every body runs in a forked child with a deadline
// (fault/bounded.hpp): a hang is a failure, never a stuck run.

#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/sink.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "background.hpp"
#include "cache_file.hpp"
#include "fault/bounded.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"

namespace lf = launchfit;
namespace fs = std::filesystem;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

lf::stored_key key(int i) {
  lf::stored_key k;
  k.device_uuid = "GPU-3f1a2b4c-0000-1111-2222-333344445555";
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = lf::kernel_fingerprint(
      lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(i) + "Pf"));
  k.policy = "max_occupancy(prefer_block=256,block_limit=0) work=items";  // as launchfit writes it
  k.smem_rule = "bytes=0";
  return k;
}

lf::plan sample_plan(int block, std::string reason = "sample") {
  lf::plan p;
  p.block = lf::dims{static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = std::min(2048 / block, 32);  // an SM of sm_90 holds 32 blocks
  p.sm_count = 132;
  p.policy = "max_occupancy(prefer_block=256,block_limit=0)";
  p.reason = std::move(reason);
  return p;
}

// Entries of the file, -1 when it is missing or not a good launchfit cache.
long entries_in(const fs::path& p) {
  if (!fs::exists(p)) return -1;
  const auto c = lf::detail::parse_cache_file(slurp(p));
  return c.status == lf::detail::cache_file_status::ok ? static_cast<long>(c.entries.size()) : -1;
}

std::optional<int> block_in_file(const fs::path& p, const lf::stored_key& k) {
  const auto c = lf::detail::parse_cache_file(slurp(p));
  for (const auto& e : c.entries) {
    if (e.key.kernel == k.kernel && e.key.bucket == k.bucket) return e.plan.block_threads;
  }
  return std::nullopt;
}

int temp_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    n += e.path().filename().string().find(".launchfit-tmp.") != std::string::npos;
  }
  return n;
}

// Captures launchfit's log in the child that runs a test body.
struct captured_log {
  std::ostringstream text;
  captured_log() {
    lf::set_logger(std::make_shared<spdlog::logger>("launchfit-fault",
                                                    std::make_shared<spdlog::sinks::ostream_sink_st>(text)));
  }
  int warnings() const {
    const std::string s = text.str();
    int n = 0;
    for (auto pos = s.find("[warning]"); pos != std::string::npos; pos = s.find("[warning]", pos + 1)) ++n;
    return n;
  }
  bool says(const std::string& what) const { return text.str().find(what) != std::string::npos; }
};

// A failed check inside a forked body: print it and make the child's exit code say so.
#define CHECK_IN_CHILD(cond, log)                                                                            \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      std::fprintf(stderr, "%s:%d: check failed: %s\nlog:\n%s\n", __FILE__, __LINE__, #cond, (log).c_str()); \
      return 1;                                                                                              \
    }                                                                                                        \
  } while (0)

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// A process that holds the flock on `lock_path` for `hold`, then exits; returns once it holds it.
pid_t hold_lock_in_peer(const fs::path& lock_path, milliseconds hold) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) _exit(3);
    if (::write(ready[1], "x", 1) != 1) _exit(4);
    std::this_thread::sleep_for(hold);
    _exit(0);
  }
  ::close(ready[1]);
  char c;
  const bool ok = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  return ok ? pid : -1;
}

class CacheFileFault : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-cache-fault-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "plans.json";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, file_;
};

}  // namespace

// A stopped peer holding the lock once stalled a lookup on another thread for seconds: stores only queue,
// lookups never wait for the writer, and the plan is written once the peer lets go.
TEST_F(CacheFileFault, ALockHeldByAPeerNeverBlocksStoresOrLookups) {
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        captured_log log;
        lf::set_cache_file(file_.string());
        lf::store_plan(key(0), sample_plan(128));
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        const pid_t peer = hold_lock_in_peer(fs::path(file_.string() + ".lock"), milliseconds(2500));
        CHECK_IN_CHILD(peer > 0, log.text.str());
        const auto held_since = clock_type::now();

        std::atomic<double> slowest_store{0}, slowest_lookup{0};
        std::atomic<bool> lookups_ok{true};
        std::thread storer([&] {
          for (int i = 1; i <= 20; ++i) {
            const auto t = clock_type::now();
            lf::store_plan(key(i), sample_plan(256));
            slowest_store = std::max(slowest_store.load(), ms_since(t));
            std::this_thread::sleep_for(milliseconds(20));
          }
        });
        std::thread reader([&] {
          for (int i = 0; i < 100; ++i) {
            const auto t = clock_type::now();
            if (!lf::find_stored_plan(key(0))) lookups_ok = false;
            slowest_lookup = std::max(slowest_lookup.load(), ms_since(t));
            std::this_thread::sleep_for(milliseconds(10));
          }
        });
        storer.join();
        reader.join();
        const double held_ms = ms_since(held_since);
        std::fprintf(stderr, "slowest store %.2f ms, slowest lookup %.2f ms (peer held the lock %.0f ms)\n",
                     slowest_store.load(), slowest_lookup.load(), held_ms);
        CHECK_IN_CHILD(held_ms < 2500, log.text.str());  // all of it happened while the peer held the lock
        CHECK_IN_CHILD(slowest_store < 100 && slowest_lookup < 100 && lookups_ok, log.text.str());
        CHECK_IN_CHILD(lf::find_stored_plan(key(20)).has_value(), log.text.str());

        int status = 0;
        ::waitpid(peer, &status, 0);
        const auto t = clock_type::now();
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        std::fprintf(stderr, "flush after the peer let go: %.0f ms\n", ms_since(t));
        CHECK_IN_CHILD(entries_in(file_) == 21, log.text.str());
        return 0;
      }));
}

// A sink that keeps, for each "probe <t>" line, how long after <t> (steady clock, µs) it was written.
class latency_sink final : public spdlog::sinks::sink {
 public:
  std::atomic<long long> worst_us{0};
  std::atomic<int> lines{0};
  void log(const spdlog::details::log_msg& m) override {
    const std::string text(m.payload.data(), m.payload.size());
    const std::size_t at = text.find("probe ");
    if (at == std::string::npos) return;
    const long long sent = std::atoll(text.c_str() + at + 6);
    const long long now = std::chrono::duration_cast<std::chrono::microseconds>(
                              clock_type::now().time_since_epoch()).count();
    worst_us = std::max(worst_us.load(), now - sent);
    ++lines;
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};

// A peer holding the plan file's lock does not hold up launchfit's background thread, which writes the log and
// the remote stores too: the writer looks at the lock once a run and comes back later. (It waited 1 s for the
// lock on that thread, then 1 s before the next try: asynchronous log lines were written up to a second late.)
TEST_F(CacheFileFault, ALockHeldByAPeerDoesNotHoldUpTheBackgroundThread) {
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        auto sink = std::make_shared<latency_sink>();
        lf::detail::reset_logging_for_tests(sink);
        lf::set_log_async(true);
        lf::set_cache_file(file_.string());
        const pid_t peer = hold_lock_in_peer(fs::path(file_.string() + ".lock"), milliseconds(4000));
        if (peer <= 0) return 2;
        lf::store_plan(key(1), sample_plan(64));  // pending: the writer tries the lock on the background thread
        for (int i = 0; i < 50; ++i) {
          const long long now = std::chrono::duration_cast<std::chrono::microseconds>(
                                    clock_type::now().time_since_epoch()).count();
          lf::detail::log_event(spdlog::level::warn, "test", "probe " + std::to_string(now));
          std::this_thread::sleep_for(milliseconds(50));
        }
        lf::logger()->flush();
        std::fprintf(stderr, "%d lines, the latest written %.0f ms after it was logged\n", sink->lines.load(),
                     sink->worst_us.load() / 1000.0);
        if (sink->lines.load() != 50) return 3;
        if (sink->worst_us.load() >= 600000) return 4;
        int status = 0;
        ::waitpid(peer, &status, 0);
        return lf::flush_cache_file() && entries_in(file_) == 1 ? 0 : 5;
      }));
}

// A long flush that returned at once does not lengthen later short ones: each attempt at the lock ends by the
// deadline of the flushes waiting now. (The latest deadline ever asked was kept: after a flush_cache_file(10000),
// every flush_cache_file(100) with the lock held took the writer's whole 1 s attempt.)
TEST_F(CacheFileFault, AShortFlushAfterALongOneEndsByItsOwnDeadline) {
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        captured_log log;
        lf::set_cache_file(file_.string());
        lf::store_plan(key(1), sample_plan(64));
        CHECK_IN_CHILD(lf::flush_cache_file(10000), log.text.str());  // the lock is free: at once
        const pid_t peer = hold_lock_in_peer(fs::path(file_.string() + ".lock"), milliseconds(3000));
        CHECK_IN_CHILD(peer > 0, log.text.str());
        lf::store_plan(key(2), sample_plan(128));
        const auto t = clock_type::now();
        const bool flushed = lf::flush_cache_file(100);
        const double waited = ms_since(t);
        std::fprintf(stderr, "flush(100) after flush(10000), lock held: %s after %.0f ms\n",
                     flushed ? "true" : "false", waited);
        CHECK_IN_CHILD(!flushed && waited < 700, log.text.str());
        int status = 0;
        ::waitpid(peer, &status, 0);
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        CHECK_IN_CHILD(entries_in(file_) == 2, log.text.str());
        return 0;
      }));
}

// The wait for the lock is bounded: flush gives up after its deadline with one warning naming the lock
// and says so; nothing is lost, a later flush writes it.
TEST_F(CacheFileFault, FlushGivesUpAfterItsDeadlineAndALaterOneWrites) {
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        captured_log log;
        lf::set_cache_file(file_.string());
        const pid_t peer = hold_lock_in_peer(fs::path(file_.string() + ".lock"), milliseconds(3000));
        CHECK_IN_CHILD(peer > 0, log.text.str());
        lf::store_plan(key(1), sample_plan(64));
        const auto before = lf::detail::background::statistics();
        auto t = clock_type::now();
        const bool flushed = lf::flush_cache_file(1500);
        const double waited = ms_since(t);
        const auto after = lf::detail::background::statistics();
        const auto runs = (after.runs + after.runs_here + after.runs_helped) -
                          (before.runs + before.runs_here + before.runs_helped);
        std::fprintf(stderr, "flush with the lock held: %s after %.0f ms, %llu writer runs\n",
                     flushed ? "true" : "false", waited, static_cast<unsigned long long>(runs));
        CHECK_IN_CHILD(!flushed && waited < 2000, log.text.str());
        // The writer looks at the busy lock paced (2 ms doubling to 50 ms: about 35 looks in 1.5 s), never in a
        // loop of runs handed to the background thread.
        CHECK_IN_CHILD(runs < 100, std::to_string(runs) + " runs\n" + log.text.str());
        CHECK_IN_CHILD(log.warnings() == 1 && log.says("plans.json.lock") && log.says("retried"),
                       log.text.str());
        int status = 0;
        ::waitpid(peer, &status, 0);
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(1)) == 64, log.text.str());
        CHECK_IN_CHILD(log.warnings() == 1, log.text.str());
        return 0;
      }));
}

// A write that meets an error that may pass (here a file size limit: EFBIG, as a full disk gives ENOSPC and a
// quota EDQUOT) keeps its plans and is tried again, with one warning: the file was turned off for the rest of
// the process, its pending plans dropped and no later plan written. (Not the descriptor limit, EMFILE, handled
// alike: the sanitizers' own checks need descriptors.)
TEST_F(CacheFileFault, AWriteErrorThatMayPassKeepsThePlansAndALaterWriteSucceeds) {
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        captured_log log;
        lf::set_cache_file(file_.string());
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        lf::store_plan(key(1), sample_plan(64));
        ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead of a signal
        rlimit before{};
        ::getrlimit(RLIMIT_FSIZE, &before);
        rlimit small = before;
        small.rlim_cur = 16;
        ::setrlimit(RLIMIT_FSIZE, &small);
        const bool flushed = lf::flush_cache_file(1000);
        ::setrlimit(RLIMIT_FSIZE, &before);
        CHECK_IN_CHILD(!flushed, log.text.str());
        CHECK_IN_CHILD(log.warnings() == 1 && log.says("cannot write it for now") && log.says("kept"),
                       log.text.str());
        CHECK_IN_CHILD(temp_files(dir_) == 0, log.text.str());
        lf::store_plan(key(2), sample_plan(128));
        CHECK_IN_CHILD(lf::flush_cache_file(3000), log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(1)) == 64, log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(2)) == 128, log.text.str());
        CHECK_IN_CHILD(log.warnings() == 1, log.text.str());
        return 0;
      }));
}

// An entry this process only read must never overwrite what another process wrote since.
TEST_F(CacheFileFault, AnEntryOnlyReadNeverOverwritesANewerOneFromAnotherProcess) {
  write_text(file_, lf::detail::serialize_cache_file({{key(0), sample_plan(128)}}));
  LAUNCHFIT_EXPECT_BOUNDED(
      9000, ([&] {
        // Another process, forked before this one starts the cache file's writer thread (held_process).
        lf::fault::held_process other_process([&] {
          lf::set_cache_file(file_.string());
          lf::store_plan(key(0), sample_plan(512));
          return lf::flush_cache_file() ? 0 : 1;
        });
        captured_log log;
        lf::set_cache_file(file_.string());  // reads key 0 = 128
        CHECK_IN_CHILD(lf::find_stored_plan(key(0))->block_threads == 128, log.text.str());
        // The other process stores a newer plan for key 0.
        const auto other = other_process.release(milliseconds(5000));
        CHECK_IN_CHILD(other.finished && other.exit_code == 0, log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(0)) == 512, log.text.str());
        // This process writes an unrelated plan: key 0 stays 512, on disk and, from now on, here too.
        lf::store_plan(key(1), sample_plan(256));
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(0)) == 512, log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(1)) == 256, log.text.str());
        CHECK_IN_CHILD(lf::find_stored_plan(key(0))->block_threads == 512, log.text.str());
        // What this process stores itself does win.
        lf::store_plan(key(0), sample_plan(32));
        CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(0)) == 32, log.text.str());
        CHECK_IN_CHILD(log.warnings() == 0, log.text.str());
        return 0;
      }));
}

// Special files as the cache path: refused with one warning, plans kept in memory, nothing hangs and
// nothing grows without bound.
TEST_F(CacheFileFault, SpecialFilesAreRefusedWithOneWarning) {
  const fs::path fifo = dir_ / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path socket_path = dir_ / "socket.json";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(sock, 1), 0);
  fs::create_directories(dir_ / "directory.json");

  for (const fs::path& path : {fifo, fs::path("/dev/zero"), dir_ / "directory.json", socket_path}) {
    SCOPED_TRACE(path.string());
    LAUNCHFIT_EXPECT_BOUNDED(
        3000, ([&] {
          // /dev/zero once grew to gigabytes in memory: fail on that with bad_alloc, not by swapping. (Not
          // under the sanitizers: their shadow memory alone reserves far more address space.)
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
          const rlimit mem{1ull << 30, 1ull << 30};
          ::setrlimit(RLIMIT_AS, &mem);
#endif
          captured_log log;
          lf::set_cache_file(path.string());
          lf::store_plan(key(0), sample_plan(128));
          CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
          lf::flush_cache_file(500);
          lf::store_plan(key(1), sample_plan(256));
          lf::flush_cache_file(500);
          CHECK_IN_CHILD(lf::stored_plan_count() == 2, log.text.str());
          CHECK_IN_CHILD(log.warnings() == 1 && log.says("not a regular file") && log.says(path.string()),
                         log.text.str());
          return 0;
        }));
  }
  ::close(sock);
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_directory(dir_ / "directory.json"));
  EXPECT_TRUE(fs::is_empty(dir_ / "directory.json"));
}

// A symbolic link to the cache: the target is updated in place of the link, under the target's lock.
TEST_F(CacheFileFault, ASymbolicLinkedCacheUpdatesItsTarget) {
  fs::create_directories(dir_ / "real");
  const fs::path target = dir_ / "real" / "plans.json";
  write_text(target, lf::detail::serialize_cache_file({{key(0), sample_plan(128)}}));
  fs::create_symlink(target, file_);
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
                             lf::store_plan(key(1), sample_plan(256));
                             CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
                             CHECK_IN_CHILD(log.warnings() == 0, log.text.str());
                             return 0;
                           }));
  EXPECT_TRUE(fs::is_symlink(file_));
  EXPECT_EQ(fs::read_symlink(file_), target);
  EXPECT_EQ(entries_in(target), 2);
  EXPECT_TRUE(fs::exists(target.string() + ".lock"));
  EXPECT_FALSE(fs::exists(file_.string() + ".lock"));
  EXPECT_EQ(temp_files(dir_ / "real"), 0);
}

TEST_F(CacheFileFault, DanglingLinksAndLinkLoopsWarnAndKeepPlansInMemory) {
  fs::create_symlink(dir_ / "missing" / "plans.json", file_);
  fs::create_symlink(dir_ / "loop-b", dir_ / "loop-a");
  fs::create_symlink(dir_ / "loop-a", dir_ / "loop-b");
  for (const auto& [path, says] : {std::pair<fs::path, std::string>{file_, "dangling symbolic link"},
                                   {dir_ / "loop-a", "Too many levels of symbolic links"}}) {
    SCOPED_TRACE(path.string());
    LAUNCHFIT_EXPECT_BOUNDED(
        3000, ([&] {
          captured_log log;
          lf::set_cache_file(path.string());
          lf::store_plan(key(0), sample_plan(128));
          lf::flush_cache_file(500);
          CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
          CHECK_IN_CHILD(log.warnings() == 1 && log.says(says) && log.says("kept in memory"), log.text.str());
          return 0;
        }));
  }
  EXPECT_TRUE(fs::is_symlink(file_));
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "loop-a"));
}

// A leftover temp file whose name a new process would pick once made the cache unwritable for that
// process's whole life; stale temp files of the cache are removed when it is written.
TEST_F(CacheFileFault, LeftoverTempFilesNeitherBlockWritesNorStay) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             captured_log log;
                             const std::string mine = file_.string() + ".launchfit-tmp." +
                                                      std::to_string(::getpid()) + ".000000000000000";
                             for (int n = 0; n < 4; ++n)
                               write_text(mine + std::to_string(n), "left by an earlier process");
                             lf::set_cache_file(file_.string());
                             lf::store_plan(key(0), sample_plan(128));
                             CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
                             CHECK_IN_CHILD(entries_in(file_) == 1, log.text.str());
                             CHECK_IN_CHILD(log.warnings() == 0, log.text.str());
                             CHECK_IN_CHILD(temp_files(dir_) == 0, log.text.str());
                             return 0;
                           }));

  const std::string hex = ".0123456789abcdef";
  const fs::path dead = dir_ / ("plans.json.launchfit-tmp.2147483646" + hex);  // above any pid_max: owner gone
  const fs::path old_alive = dir_ / ("plans.json.launchfit-tmp.1" + hex);  // pid 1 lives, but an hour is too old
  const fs::path young_alive = dir_ / "plans.json.launchfit-tmp.1.fedcba9876543210";
  const fs::path other_cache = dir_ / ("other.json.launchfit-tmp.2147483646" + hex);
  // Names a user may give their own files, however dead the pid they seem to hold or old they are: never
  // the library's to delete (only the exact name replace_file() writes is).
  const std::vector<fs::path> users = {
      dir_ / "plans.json.tmp.2147483646.1",                             // the look of a temp name
      dir_ / ("plans.json.tmp.2147483646" + hex),                       // the old temp name
      dir_ / ("plans.json.launchfit-tmp.2147483646" + hex + ".bak"),    // more after it
      dir_ / "plans.json.launchfit-tmp.2147483646.0123456789ABCDEF",    // upper case
      dir_ / "plans.json.launchfit-tmp.2147483646.0123456789abcde",     // 15 digits
      dir_ / ("plans.json.launchfit-tmp.02147483646" + hex),            // a leading zero
      dir_ / "plans.json.launchfit-tmp.backup",
  };
  for (const auto& p : {dead, old_alive, young_alive, other_cache}) write_text(p, "partial");
  const timespec times[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old_alive.c_str(), times, 0), 0);
  for (const auto& p : users) {
    write_text(p, "a user's own file");
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  }
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             lf::store_plan(key(1), sample_plan(256));
                             CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
                             return 0;
                           }));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(old_alive));
  EXPECT_TRUE(fs::exists(young_alive));
  EXPECT_TRUE(fs::exists(other_cache));
  for (const auto& p : users) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_EQ(entries_in(file_), 2);
}

// Writers killed with SIGKILL at random points leave a valid cache and a bounded number of temp files.
TEST_F(CacheFileFault, WritersKilledMidWriteLeaveAValidCacheAndFewTempFiles) {
  std::vector<lf::detail::stored_entry> big;
  for (int i = 0; i < 1000; ++i) big.push_back({key(1000 + i), sample_plan(128, std::string(400, 'r'))});
  write_text(file_, lf::detail::serialize_cache_file(big));
  std::srand(42);
  const auto start = clock_type::now();
  for (int round = 0; round < 8; ++round) {
    int loaded[2];
    ASSERT_EQ(::pipe(loaded), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      lf::set_cache_file(file_.string());
      if (::write(loaded[1], "x", 1) != 1) _exit(1);
      for (int i = 0;; ++i) {
        lf::store_plan(key(i), sample_plan(32 << (i % 5)));
        lf::flush_cache_file();
      }
    }
    ::close(loaded[1]);
    char c;
    ASSERT_EQ(::read(loaded[0], &c, 1), 1);  // killed while writing, not while loading
    ::close(loaded[0]);
    std::this_thread::sleep_for(milliseconds(std::rand() % 60));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  const int left = temp_files(dir_);
  std::fprintf(stderr, "8 killed writers: %.0f ms, %d temp files left\n", ms_since(start), left);
  EXPECT_LE(left, 1);  // at most the one of the last writer killed
  EXPECT_GE(entries_in(file_), 1000);
  // A new writer cleans up what the killed ones left.
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             lf::store_plan(key(99999), sample_plan(64));
                             CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
                             return 0;
                           }));
  EXPECT_EQ(temp_files(dir_), 0);
  EXPECT_GE(entries_in(file_), 1001);
}

// A 1.8 MB cache once cost a whole rewrite per new plan, on the launching thread.
TEST_F(CacheFileFault, ManyNewPlansCostOneWritePerBatchNotPerPlan) {
  std::vector<lf::detail::stored_entry> big;
  for (int i = 0; i < 2000; ++i) big.push_back({key(10000 + i), sample_plan(128, std::string(400, 'r'))});
  write_text(file_, lf::detail::serialize_cache_file(big));
  LAUNCHFIT_EXPECT_BOUNDED(9000, ([&] {
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             const auto t = clock_type::now();
                             for (int i = 0; i < 200; ++i) lf::store_plan(key(i), sample_plan(256));
                             const double store_ms = ms_since(t);
                             const auto f = clock_type::now();
                             CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
                             std::fprintf(stderr, "200 stores: %.1f ms; flush: %.0f ms\n", store_ms,
                                          ms_since(f));
                             CHECK_IN_CHILD(store_ms < 200, log.text.str());
                             CHECK_IN_CHILD(entries_in(file_) == 2200, log.text.str());
                             return 0;
                           }));
}

// Above LAUNCHFIT_CACHE_MAX_BYTES a file is not loaded (one warning, left untouched); at most
// LAUNCHFIT_CACHE_MAX_ENTRIES are kept, the oldest dropped first.
TEST_F(CacheFileFault, SizeCapsBoundWhatIsLoadedAndKept) {
  std::vector<lf::detail::stored_entry> some;
  for (int i = 0; i < 40; ++i) some.push_back({key(1000 + i), sample_plan(128)});
  const std::string text = lf::detail::serialize_cache_file(some);
  write_text(file_, text);
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             ::setenv("LAUNCHFIT_CACHE_MAX_BYTES", "10000", 1);
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             CHECK_IN_CHILD(lf::stored_plan_count() == 0, log.text.str());
                             lf::store_plan(key(0), sample_plan(128));
                             lf::flush_cache_file(500);
                             CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
                             CHECK_IN_CHILD(log.warnings() == 1 && log.says("LAUNCHFIT_CACHE_MAX_BYTES"),
                                            log.text.str());
                             return 0;
                           }));
  EXPECT_EQ(slurp(file_), text);

  fs::remove(file_);
  LAUNCHFIT_EXPECT_BOUNDED(
      5000, ([&] {
        ::setenv("LAUNCHFIT_CACHE_MAX_ENTRIES", "10", 1);
        captured_log log;
        lf::set_cache_file(file_.string());
        for (int i = 0; i < 25; ++i) {
          lf::store_plan(key(i), sample_plan(128));
          if (i % 5 == 4) {
            CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
            std::this_thread::sleep_for(milliseconds(5));  // stored_at has a resolution of a millisecond
          }
        }
        CHECK_IN_CHILD(entries_in(file_) == 10, log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(24)) && block_in_file(file_, key(15)), log.text.str());
        CHECK_IN_CHILD(!block_in_file(file_, key(14)), log.text.str());
        return 0;
      }));
}

// A limit is this process's: it drops this process's own oldest entries, never what other processes wrote
// to the shared file (only an operator's launchfit-plans prune does). When others' entries alone exceed it,
// this process adds nothing, says so once and keeps its plans in memory.
TEST_F(CacheFileFault, ALimitNeverEvictsWhatOtherProcessesWrote) {
  std::vector<lf::detail::stored_entry> others;
  for (int i = 0; i < 40; ++i) others.push_back({key(1000 + i), sample_plan(128)});
  for (auto& e : others) e.stored_at_ms = 1;  // older than anything this process stores
  const std::string text = lf::detail::serialize_cache_file(others);
  write_text(file_, text);
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             ::setenv("LAUNCHFIT_CACHE_MAX_ENTRIES", "10", 1);
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             for (int i = 0; i < 3; ++i) lf::store_plan(key(i), sample_plan(128));
                             CHECK_IN_CHILD(!lf::flush_cache_file(500), log.text.str());
                             CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
                             CHECK_IN_CHILD(log.warnings() == 1 && log.says("never removes what others wrote"),
                                            log.text.str());
                             return 0;
                           }));
  EXPECT_EQ(slurp(file_), text);

  // Room for some: this process's newest fill it, every entry of the others stays.
  others.resize(5);
  write_text(file_, lf::detail::serialize_cache_file(others));
  LAUNCHFIT_EXPECT_BOUNDED(
      5000, ([&] {
        ::setenv("LAUNCHFIT_CACHE_MAX_ENTRIES", "10", 1);
        captured_log log;
        lf::set_cache_file(file_.string());
        for (int i = 0; i < 12; ++i) {
          lf::store_plan(key(i), sample_plan(128));
          if (i % 4 == 3) {
            CHECK_IN_CHILD(lf::flush_cache_file(), log.text.str());
            std::this_thread::sleep_for(milliseconds(5));  // stored_at has a resolution of a millisecond
          }
        }
        CHECK_IN_CHILD(entries_in(file_) == 10, log.text.str());
        for (int i = 0; i < 5; ++i) CHECK_IN_CHILD(block_in_file(file_, key(1000 + i)), log.text.str());
        CHECK_IN_CHILD(block_in_file(file_, key(11)) && block_in_file(file_, key(8)), log.text.str());
        CHECK_IN_CHILD(!block_in_file(file_, key(3)), log.text.str());
        CHECK_IN_CHILD(log.warnings() == 0, log.text.str());
        return 0;
      }));
}

// A byte limit below what a file of no plan takes: nothing fits, and the warning says so (it blamed other
// processes' entries, of which the file had none).
TEST_F(CacheFileFault, AByteLimitBelowAnEmptyFileSaysNoPlanFits) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([&] {
                             ::setenv("LAUNCHFIT_CACHE_MAX_BYTES", "16", 1);
                             captured_log log;
                             lf::set_cache_file(file_.string());
                             lf::store_plan(key(0), sample_plan(128));
                             CHECK_IN_CHILD(!lf::flush_cache_file(500), log.text.str());
                             CHECK_IN_CHILD(lf::find_stored_plan(key(0)).has_value(), log.text.str());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text.str());
                             CHECK_IN_CHILD(log.says("LAUNCHFIT_CACHE_MAX_BYTES (16) is below what a plan file of no "
                                                     "plan takes"),
                                            log.text.str());
                             CHECK_IN_CHILD(!log.says("other processes"), log.text.str());
                             return 0;
                           }));
}

// Plans stored before a normal exit are written by then, without an explicit flush.
TEST_F(CacheFileFault, ANormalExitWritesPendingPlans) {
  const auto r = lf::fault::run_bounded(milliseconds(5000), [&] {
    ::setenv("LAUNCHFIT_CACHE", file_.c_str(), 1);
    for (int i = 0; i < 5; ++i) lf::store_plan(key(i), sample_plan(128));
    std::exit(0);  // atexit handlers run; run_bounded's _exit would skip them
    return 0;
  });
  EXPECT_TRUE(r.finished && r.exit_code == 0);
  EXPECT_EQ(entries_in(file_), 5);
}

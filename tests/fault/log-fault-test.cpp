// SPDX-License-Identifier: MIT
// Logging under hostile conditions: exit with lines still queued, a stuck output, a line from a static
// destructor, loggers swapped and levels changed while other threads log, fork. Each test runs in a
// bounded child process: a hang is a failure.

#include <dlfcn.h>
#include <pthread.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault/bounded.hpp"
#include "launchfit/log.hpp"
#include "async_sink.hpp"
#include "log_internal.hpp"

namespace lf = launchfit;
using namespace std::chrono_literals;

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define LAUNCHFIT_TEST_FAILS_THREADS 1
// Thread creation made to fail (a process at its thread limit), where a test asks: this program's own
// pthread_create comes before libc's. Not under the sanitizers, whose runtimes intercept it themselves.
std::atomic<bool> fail_thread_creation{false};
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  if (fail_thread_creation.load()) return EAGAIN;
  using create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const create_fn real = reinterpret_cast<create_fn>(::dlsym(RTLD_NEXT, "pthread_create"));
  return real(thread, attr, start, arg);
}
#endif

namespace {

std::string scratch_file(const char* name) {
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/log-fault-" + name + "-" + std::to_string(getpid()) +
         ".log";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Set when launchfit's exit drain finds lines not yet written and starts waiting for them.
std::atomic<bool> exit_waiting{false};
void note_exit_waiting() { exit_waiting = true; }
void wait_for_the_exit_drain() {
  while (!exit_waiting) std::this_thread::sleep_for(1ms);
}

std::atomic<bool> lines_taken{false};  // set by a test's hook

// Writes launchfit's lines to `path` (in the child).
void log_to_file(const std::string& path) {
  lf::detail::reset_logging_for_tests(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, true));
}

// A sink that blocks every write until the process ends, like a full pipe nobody reads.
class stuck_sink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg&) override {
    for (;;) std::this_thread::sleep_for(1h);
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};

// A file output that can be held (every write waits until it is released, like a pipe whose reader
// paused) and that takes `per_line` for each line while it moves, like a slow pipe or disk.
class held_file_sink final : public spdlog::sinks::sink {
 public:
  explicit held_file_sink(const std::string& path)
      : file_(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, true)) {}
  std::atomic<bool> held{false};
  std::atomic<std::chrono::microseconds> per_line{std::chrono::microseconds(0)};
  std::atomic<int> seen{0};  // lines that reached the output, held or not
  // The line (1: the first) that waits until launchfit's exit drain waits for it; 0: none.
  std::atomic<int> wait_for_exit_at{0};

  void log(const spdlog::details::log_msg& m) override {
    if (++seen == wait_for_exit_at) wait_for_the_exit_drain();
    while (held) std::this_thread::sleep_for(1ms);
    if (per_line.load().count() > 0) std::this_thread::sleep_for(per_line.load());
    file_->log(m);
  }
  void flush() override { file_->flush(); }
  void set_pattern(const std::string& p) override { file_->set_pattern(p); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override { file_->set_formatter(std::move(f)); }

 private:
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file_;
};

// Sum of the N of every "launchfit log queue full: N lines dropped" line.
long long reported_drops(const std::string& text) {
  const std::string head = "launchfit log queue full: ";
  long long n = 0;
  for (std::size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1))
    n += std::atoll(text.c_str() + at + head.size());
  return n;
}


struct logs_when_destroyed {
  ~logs_when_destroyed() { lf::detail::log_event(spdlog::level::warn, "test", "from a static destructor"); }
};

}  // namespace

TEST(LogFault, AnAsyncProcessThatLogsAndExitsWritesEveryLineAndEnds) {
  const std::string path = scratch_file("exit");
  LAUNCHFIT_EXPECT_BOUNDED(5000, [&] {
    log_to_file(path);
    lf::set_log_async(true);
    for (int i = 0; i < 2000; ++i) lf::detail::log_event(spdlog::level::info, "test", "queued line");
    std::exit(0);  // atexit handlers and static destructors run, as in a real program
    return 1;
  });
  EXPECT_EQ(count(read_all(path), "queued line"), 2000);
  std::remove(path.c_str());
}

// The process exits while the logging thread has just taken lines off the queue and not yet written them.
TEST(LogFault, AnExitRightAfterTheLoggingThreadTookLinesWaitsForThem) {
  const std::string path = scratch_file("taken");
  LAUNCHFIT_EXPECT_BOUNDED(5000, [&] {
    log_to_file(path);
    lf::set_log_async(true);
    lf::detail::log_exit_waiting_for_tests = note_exit_waiting;
    lf::detail::log_batch_taken_for_tests = [] {
      lf::detail::log_batch_taken_for_tests = nullptr;
      lines_taken = true;
      wait_for_the_exit_drain();  // the exit is waiting for the line this thread holds
    };
    lf::detail::log_event(spdlog::level::info, "test", "taken line");
    while (!lines_taken) std::this_thread::sleep_for(1ms);
    std::exit(0);
    return 1;
  });
  EXPECT_EQ(count(read_all(path), "taken line"), 1);
  std::remove(path.c_str());
}

TEST(LogFault, ALineFromAStaticDestructorIsWrittenWithAsyncLogging) {
  for (const bool destroyed_after_the_exit_drain : {true, false}) {
    const std::string path = scratch_file("static");
    LAUNCHFIT_EXPECT_BOUNDED(5000, [&] {
      // A static made before async logging starts is destroyed after launchfit's exit drain, one made
      // later before it: both lines must be written.
      if (destroyed_after_the_exit_drain) static logs_when_destroyed early;
      log_to_file(path);
      lf::set_log_async(true);
      if (!destroyed_after_the_exit_drain) static logs_when_destroyed late;
      lf::detail::log_event(spdlog::level::info, "test", "before exit");
      std::exit(0);
      return 1;
    });
    const std::string text = read_all(path);
    EXPECT_EQ(count(text, "before exit"), 1) << text;
    EXPECT_EQ(count(text, "from a static destructor"), 1) << destroyed_after_the_exit_drain << ": " << text;
    std::remove(path.c_str());
  }
}

TEST(LogFault, ASyncLineFromAStaticDestructorIsWritten) {
  const std::string path = scratch_file("static-sync");
  LAUNCHFIT_EXPECT_BOUNDED(5000, [&] {
    log_to_file(path);
    static logs_when_destroyed late;
    std::exit(0);
    return 1;
  });
  EXPECT_EQ(count(read_all(path), "from a static destructor"), 1);
  std::remove(path.c_str());
}

TEST(LogFault, AStuckOutputNeverBlocksTheLoggerNorTheExit) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, [] {
    lf::detail::reset_logging_for_tests(std::make_shared<stuck_sink>());
    lf::set_log_async(true);
    // A launching thread that waited for the stuck output would never come back: the deadline catches it.
    for (int i = 0; i < 20000; ++i) lf::detail::log_event(spdlog::level::info, "test", "into a stuck output");
    if (lf::log_lines_dropped() == 0) return 3;  // the queue bound held, and the drops were counted
    std::exit(0);                                // the exit drain gives up on the stuck output
    return 1;
  });
}

TEST(LogFault, AnOutputThatGetsStuckAsTheProcessExitsNeverBlocksTheExit) {
  // The output takes the first line only once the exit has begun, then takes no more: the lines still
  // queued at exit must not be written into it by the exiting thread.
  class sticks_at_exit final : public spdlog::sinks::sink {
   public:
    void log(const spdlog::details::log_msg&) override {
      if (lines_++ == 0) {
        wait_for_the_exit_drain();  // the exit is waiting, with the other lines still queued
        return;
      }
      for (;;) std::this_thread::sleep_for(1h);
    }
    void flush() override {}
    void set_pattern(const std::string&) override {}
    void set_formatter(std::unique_ptr<spdlog::formatter>) override {}

   private:
    std::atomic<int> lines_{0};
  };
  LAUNCHFIT_EXPECT_BOUNDED(5000, [] {
    lf::detail::reset_logging_for_tests(std::make_shared<sticks_at_exit>());
    lf::set_log_async(true);
    lf::detail::log_exit_waiting_for_tests = note_exit_waiting;
    for (int i = 0; i < 100; ++i) lf::detail::log_event(spdlog::level::info, "test", "line");
    std::exit(0);
    return 1;
  });
}

TEST(LogFault, ASlowOutputStillMovingAtExitGetsEveryLine) {
  // The logging thread is writing a long batch to a slow output when the process exits: the exit waits
  // while the output moves.
  const std::string path = scratch_file("slow");
  LAUNCHFIT_EXPECT_BOUNDED(9000, [&] {
    auto out = std::make_shared<held_file_sink>(path);
    out->held = true;
    lf::detail::reset_logging_for_tests(out);
    lf::set_log_async(true);
    lf::detail::log_event(spdlog::level::info, "test", "slow line");
    while (out->seen == 0) std::this_thread::sleep_for(1ms);  // the logging thread holds that one line
    for (int i = 1; i < 1000; ++i) lf::detail::log_event(spdlog::level::info, "test", "slow line");
    lf::detail::log_exit_waiting_for_tests = note_exit_waiting;
    out->wait_for_exit_at = 2;  // the other 999 move only once the exit waits for them
    out->per_line = 1ms;
    out->held = false;
    std::exit(0);
    return 1;
  });
  EXPECT_EQ(count(read_all(path), "msg=\"slow line\"\n"), 1000);
  std::remove(path.c_str());
}

TEST(LogFault, QueueOverflowIsReportedWhenTheOutputMovesAgain) {
  const std::string path = scratch_file("overflow");
  const int lines = 100000;
  LAUNCHFIT_EXPECT_BOUNDED(8000, [&] {
    auto out = std::make_shared<held_file_sink>(path);
    out->held = true;  // the queue fills whatever the speed of either thread
    lf::detail::reset_logging_for_tests(out);
    lf::set_log_async(true);
    for (int i = 0; i < lines; ++i) lf::detail::log_event(spdlog::level::info, "test", "flood");
    if (lf::log_lines_dropped() == 0) return 3;
    out->held = false;
    lf::logger()->flush();
    std::exit(0);
    return 1;
  });
  // Every line is either written or counted in a report.
  const std::string text = read_all(path);
  EXPECT_GE(count(text, "launchfit log queue full: "), 1) << text.substr(0, 300);
  EXPECT_EQ(count(text, "msg=flood\n") + reported_drops(text), lines);
  std::remove(path.c_str());
}

TEST(LogFault, SwappingLoggersAndLevelsWhileOtherThreadsLogNeitherCrashesNorHangs) {
  for (const bool async : {false, true}) {
    LAUNCHFIT_EXPECT_BOUNDED(8000, [async] {
      log_to_file("/dev/null");
      lf::set_log_async(async);
      std::atomic<bool> stop{false};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
          while (!stop) {
            lf::detail::log_event(spdlog::level::info, "test", "x\ny", {{"k", "v"}});
            lf::detail::logger()->warn("direct {}", 1);
            (void)lf::detail::logger_fast().should_log(spdlog::level::trace);
          }
        });
      }
      threads.emplace_back([&] {
        auto mine = std::make_shared<spdlog::logger>(
            "mine", std::make_shared<spdlog::sinks::basic_file_sink_mt>("/dev/null"));
        for (int i = 0; !stop; ++i) {
          lf::set_logger(i % 2 ? mine : nullptr);
          lf::set_log_format(i % 3 ? lf::log_format::json : lf::log_format::text);
          lf::logger()->set_level(i % 4 ? spdlog::level::info : spdlog::level::off);
        }
      });
      std::this_thread::sleep_for(500ms);
      stop = true;
      for (auto& t : threads) t.join();
      lf::set_logger(nullptr);
      std::exit(0);
      return 1;
    });
  }
}

TEST(LogFault, AForkedChildOfAnAsyncLoggerLogsAndExits) {
  const std::string path = scratch_file("fork");
  LAUNCHFIT_EXPECT_BOUNDED(8000, [&] {
    log_to_file(path);
    lf::set_log_async(true);
    for (int i = 0; i < 1000; ++i) lf::detail::log_event(spdlog::level::info, "test", "parent line");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // GCC 12's sanitizer allocator has no fork handlers: a child forked while the logging thread is inside it
    // (freeing a batch it wrote) can hang there. Under a sanitizer the thread finishes what it was given first
    // (as tests/fault/fork-test.cpp does); without one the fork lands wherever the thread is.
    lf::logger()->flush();
    std::this_thread::sleep_for(20ms);
#endif
    // The grandchild starts a logging thread of its own; its line must be written, and it must exit.
    const auto r = lf::fault::run_bounded(3000ms, [] {
      lf::detail::log_event(spdlog::level::info, "test", "child line");
      std::exit(0);
      return 1;
    });
    if (!r.finished || r.exit_code != 0) return 2;
    std::exit(0);
    return 1;
  });
  // Both processes append to one file while the parent's logging thread may still be writing; the file
  // output goes out in stdio-buffer chunks, not whole lines, so the child's line can land inside a parent
  // line. Nothing may be lost: the child's line is there whole once, and without it every parent line is.
  std::string text = read_all(path);
  const std::regex child_line(R"(time=\S+ level=info logger=launchfit pid=\d+ msg="child line"\n)");
  EXPECT_EQ(std::distance(std::sregex_iterator(text.begin(), text.end(), child_line), std::sregex_iterator()),
            1);
  text = std::regex_replace(text, child_line, "");
  EXPECT_EQ(count(text, "child line"), 0);
  EXPECT_EQ(count(text, "msg=\"parent line\"\n"), 1000);
  std::remove(path.c_str());
}

// A process that cannot start launchfit's background thread (at its thread limit) still gets every line of
// asynchronous logging: the caller writes it. (Lines were queued for a thread that never ran, a flush waited 1 s
// for nothing and the exit dropped them.)
TEST(LogFault, WithoutABackgroundThreadAsyncLinesAreWrittenByTheCaller) {
#if defined(LAUNCHFIT_TEST_FAILS_THREADS)
  const std::string path = scratch_file("no-thread");
  LAUNCHFIT_EXPECT_BOUNDED(5000, [&] {
    fail_thread_creation = true;  // this child of fork() has no background thread yet, and gets none
    log_to_file(path);
    lf::set_log_async(true);
    lf::detail::log_event(spdlog::level::warn, "test", "line without a thread");
    lf::detail::log_event(spdlog::level::info, "test", "line without a thread");
    lf::logger()->flush();
    const int written = count(read_all(path), "line without a thread");
    fail_thread_creation = false;
    return written == 2 ? 0 : 1;
  });
  EXPECT_EQ(count(read_all(path), "line without a thread"), 2);
  std::remove(path.c_str());
#else
  GTEST_SKIP() << "the sanitizers' runtimes intercept pthread_create themselves";
#endif
}

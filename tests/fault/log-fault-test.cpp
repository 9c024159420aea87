// Logging under hostile conditions: exit with lines still queued, a stuck output, a line from a static
// destructor, loggers swapped and levels changed while other threads log, fork. Each test runs in a
// bounded child process: a hang is a failure.

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault/bounded.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"

namespace lf = launchfit;
using namespace std::chrono_literals;

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
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) lf::detail::log_event(spdlog::level::info, "test", "into a stuck output");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 2.0) return 2;                 // the launching thread waited for the output
    if (lf::log_lines_dropped() == 0) return 3;  // the queue bound held, and the drops were counted
    std::exit(0);                                // the exit drain gives up on the stuck output
    return 1;
  });
}

TEST(LogFault, QueueOverflowIsReportedWhenTheOutputMovesAgain) {
  const std::string path = scratch_file("overflow");
  LAUNCHFIT_EXPECT_BOUNDED(8000, [&] {
    log_to_file(path);
    lf::set_log_async(true);
    for (int i = 0; i < 100000; ++i) lf::detail::log_event(spdlog::level::info, "test", "flood");
    lf::logger()->flush();
    std::exit(lf::log_lines_dropped() > 0 ? 0 : 3);
    return 1;
  });
  const std::string text = read_all(path);
  EXPECT_GE(count(text, "launchfit log queue full: "), 1) << text.substr(0, 300);
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

TEST(LogFault, AForkedChildOfAnAsyncLoggerLogsSynchronouslyAndExits) {
  const std::string path = scratch_file("fork");
  LAUNCHFIT_EXPECT_BOUNDED(8000, [&] {
    log_to_file(path);
    lf::set_log_async(true);
    for (int i = 0; i < 1000; ++i) lf::detail::log_event(spdlog::level::info, "test", "parent line");
    // The grandchild has no logging thread; its line must still be written, and it must exit.
    const auto r = lf::fault::run_bounded(3000ms, [] {
      lf::detail::log_event(spdlog::level::info, "test", "child line");
      std::exit(0);
      return 1;
    });
    if (!r.finished || r.exit_code != 0) return 2;
    std::exit(0);
    return 1;
  });
  const std::string text = read_all(path);
  EXPECT_EQ(count(text, "child line"), 1);
  EXPECT_EQ(count(text, "parent line"), 1000);
  std::remove(path.c_str());
}

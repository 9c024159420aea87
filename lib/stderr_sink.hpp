// SPDX-License-Identifier: MIT
#pragma once
// launchfit's own stderr output. It formats as spdlog's sinks do but writes with write(2) on descriptor 2,
// never through stdio's `stderr`: a line stuck on a full pipe would hold that FILE's lock, and exit() (the
// C++ runtime flushing std::cerr) would then wait for it forever. Its lock is its own, not spdlog's
// process-wide console lock, so another logger of the program writing to the console at a fork cannot
// leave launchfit's output locked in the child; a child whose parent was stuck inside it gets a new one.

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <new>

namespace launchfit::detail {

class stderr_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // In a child of fork() only, when a thread of the parent may have been inside the sink: the old lock is
  // left as it is (held by a thread that does not exist here).
  void replace_lock_after_fork() { new (&mutex_) std::mutex; }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(2, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // closed or broken: a log line is not worth an error of its own
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}  // nothing is buffered
};

}  // namespace launchfit::detail

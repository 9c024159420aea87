// SPDX-License-Identifier: MIT
#pragma once
// Shared by the bad-input tests: capturing what launchfit logs, and a substring check for messages.

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "launchfit/log.hpp"

namespace launchfit_test {

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Replaces the "launchfit" logger for the object's lifetime; lines read "[<level>] <message>".
class captured_log {
 public:
  explicit captured_log(spdlog::level::level_enum level) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto l = std::make_shared<spdlog::logger>("launchfit", sink);
    l->set_level(level);
    l->set_pattern("[%l] %v");
    launchfit::set_logger(l);
  }
  ~captured_log() { launchfit::set_logger(nullptr); }
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;
  std::string text() const { return out_.str(); }
  int warnings() const {
    int n = 0;
    const std::string t = out_.str();
    for (std::size_t at = t.find("[warning]"); at != std::string::npos; at = t.find("[warning]", at + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
};

}  // namespace launchfit_test

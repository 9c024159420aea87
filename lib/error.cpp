#include "launchfit/error.hpp"

#include <utility>

namespace launchfit {
namespace {

// "<call>: <cuda_error> (<message>) [kernel <k>] [plan <config>]", leaving out whatever is empty so a
// log line never shows "()" or "[kernel ]".
std::string format_what(const std::string& call, const std::string& cuda_error, const std::string& message,
                        const std::string& kernel, const std::string& config) {
  std::string out = call;
  auto append = [&out](const std::string& part) {
    if (part.empty()) return;
    if (!out.empty()) out += ' ';
    out += part;
  };
  if (!cuda_error.empty()) {
    if (!out.empty()) out += ':';
    append(cuda_error);
  }
  if (!message.empty()) {
    if (cuda_error.empty() && !out.empty()) out += ':';
    append('(' + message + ')');
  }
  if (!kernel.empty()) append("[kernel " + kernel + ']');
  if (!config.empty()) append("[plan " + config + ']');
  return out;
}

}  // namespace

error::error(std::string call, std::string cuda_error, std::string message, std::string kernel,
             std::string config)
    : std::runtime_error(format_what(call, cuda_error, message, kernel, config)),
      call_(std::move(call)),
      cuda_error_(std::move(cuda_error)),
      message_(std::move(message)),
      kernel_(std::move(kernel)),
      config_(std::move(config)) {}

}  // namespace launchfit

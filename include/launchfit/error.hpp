#pragma once
// launchfit::error — the one exception type launchfit throws.

#include <stdexcept>
#include <string>

namespace launchfit {

// Thrown for every refused launch and every failed CUDA call. what() reads
// "<call>: <cuda error name> (<message>) [kernel <name>] [plan <config>]" so a log line alone says what to fix.
class error : public std::runtime_error {
 public:
  error(std::string call, std::string cuda_error, std::string message, std::string kernel = {},
        std::string config = {});

  // The failing call or check, e.g. "cuLaunchKernelEx" or "validate(block)".
  const std::string& call() const noexcept { return call_; }
  // The CUDA error name (e.g. "CUDA_ERROR_INVALID_VALUE"), or a launchfit code such as "LAUNCHFIT_INVALID_PLAN".
  const std::string& cuda_error() const noexcept { return cuda_error_; }
  const std::string& message() const noexcept { return message_; }
  // Demangled kernel name, empty when the error is not about one kernel.
  const std::string& kernel() const noexcept { return kernel_; }
  // The launch configuration (block, grid, smem, policy) involved, empty when none was formed yet.
  const std::string& config() const noexcept { return config_; }

 private:
  std::string call_, cuda_error_, message_, kernel_, config_;
};

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup errors
/// \brief launchfit::error, the one exception type launchfit throws, and launchfit::errc, what went wrong.
///
// launchfit::error — the one exception type launchfit throws, and launchfit::errc, what went wrong.

#include <stdexcept>
#include <string>

#include "launchfit/export.hpp"

namespace launchfit {

// What went wrong, in launchfit's terms: branch on this, never on an error's name or message. A CUDA
// status, where there is one, is error::cuda_result() as well.
enum class errc : int {
  other = 0,              // a name launchfit does not know (e.g. a CUDA runtime error name)
  cuda,                   // a CUDA call failed for another reason: see cuda_result(), is_sticky()
  no_driver,              // no usable driver or device: libcuda missing or too old, cuInit failed
  invalid_argument,       // a null kernel, handle or image; a bad value; a grid too large
  not_found,              // a module file or a kernel name that does not exist
  invalid_policy,         // a null policy, or a policy that refused its query or decided nothing usable
  unknown_policy,         // no policy is registered under that name
  duplicate_policy,       // register_policy with a name already taken
  bad_policy_string,      // a policy string or LAUNCHFIT_POLICY entry that does not parse
  bad_policy_parameter,   // a policy parameter that is unknown, malformed or out of range
  invalid_plan,           // a plan breaks a kernel or device limit
  cooperative_too_large,  // a cooperative grid larger than the blocks that can co-reside
  cluster,                // cluster dimensions the kernel or device cannot run
  unknown_arch,           // no limits are known for this compute capability (offline calculator)
  plugin,                 // a loaded plugin failed or returned an error (refused to load: plugin_refused)
  internal,               // a launchfit bug
  missing_work,           // grid_for() sizing items(n) with a plan made without work by a policy that decides by it
  not_planned_yet,        // plan_for() before the first launch of a launch that is tuned on its first run
  pdl_unsupported,        // .pdl() on a kernel whose running binary cannot wait for the previous kernel
  invalid_query,          // a policy was asked with a query it cannot answer (empty device limits)
  invalid_config,         // the occupancy calculator refuses a block size, smem or kernel resources
  plugin_refused,         // load_plugin refused a file: missing, not a shared object, wrong ABI, a duplicate
};

// The name launchfit gives a code, e.g. "invalid_plan".
LAUNCHFIT_API const char* to_string(errc code) noexcept;

// True for the CUresults after which the CUDA context is unusable (every later call returns them):
// ILLEGAL_ADDRESS, LAUNCH_FAILED, MISALIGNED_ADDRESS, ILLEGAL_INSTRUCTION, INVALID_PC, HARDWARE_STACK_ERROR,
// INVALID_ADDRESS_SPACE, ASSERT, LAUNCH_TIMEOUT.
LAUNCHFIT_API bool is_sticky_cuda_result(int cuda_result) noexcept;

// Thrown for every refused launch and every failed CUDA call. what() reads
// "<call>: <error name> (<message>) [kernel <name>] [plan <config>]" so a log line alone says what to fix.
class LAUNCHFIT_API error : public std::runtime_error {
 public:
  // By name, for errors that come from elsewhere (a CUDA runtime name such as "cudaErrorInvalidValue", a
  // CUDA driver name, a launchfit name read back from a log): code() and cuda_result() follow from the name
  // where launchfit knows it. launchfit itself never builds an error this way: it names a code or a CUresult.
  error(std::string call, std::string cuda_error, std::string message, std::string kernel = {},
        std::string config = {});
  // By code; the name is launchfit's name for the code (e.g. "LAUNCHFIT_INVALID_PLAN"), cuda_result() is 0.
  error(errc code, std::string call, std::string message, std::string kernel = {}, std::string config = {});
  // A CUDA driver status (a CUresult converts to int): a failed call, or a refusal launchfit makes in the
  // driver's terms before calling it. The name is the driver's (cuGetErrorName) where a driver is loaded,
  // else this toolkit's for the statuses launchfit reports itself, else "CUresult <n>"; code() follows.
  error(int cuda_result, std::string call, std::string message, std::string kernel = {},
        std::string config = {});

  // This error naming the kernel (and the plan) it happened to: a copy with kernel() and config() set where
  // they are empty, so an error passed up through several layers names its kernel once. Everything else
  // (code, status, name, call, message) is unchanged.
  error with_kernel(std::string kernel, std::string config = {}) const;

  // What went wrong, as a value to branch on (never the name string).
  errc code() const noexcept { return code_; }
  // The CUresult where the error has a CUDA driver status (whatever code() says), else 0.
  int cuda_result() const noexcept { return cuda_result_; }
  // The CUDA context is unusable after this error (see is_sticky_cuda_result()).
  bool is_sticky() const noexcept { return is_sticky_cuda_result(cuda_result_); }

  // The failing call or check, e.g. "cuLaunchKernelEx" or "validate(block)".
  const std::string& call() const noexcept { return call_; }
  // The CUDA error name (e.g. "CUDA_ERROR_INVALID_VALUE"), or a launchfit code such as "LAUNCHFIT_INVALID_PLAN".
  const std::string& cuda_error() const noexcept { return cuda_error_; }
  // What happened and what to change, without the call, kernel and configuration.
  const std::string& message() const noexcept { return message_; }
  // Demangled kernel name, empty when the error is not about one kernel.
  const std::string& kernel() const noexcept { return kernel_; }
  // The launch configuration (block, grid, smem, policy) involved, empty when none was formed yet.
  const std::string& config() const noexcept { return config_; }

 private:
  // Every field given: the name is not parsed.
  error(std::string call, std::string cuda_error, errc code, int cuda_result, std::string message,
        std::string kernel, std::string config);

  std::string call_, cuda_error_, message_, kernel_, config_;
  errc code_ = errc::other;
  int cuda_result_ = 0;
};

}  // namespace launchfit

// SPDX-License-Identifier: MIT
#include "launchfit/error.hpp"

#include "launchfit/detail/throw_error.hpp"

#include <cuda.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iterator>
#include <string_view>
#include <utility>

namespace launchfit {
namespace {

struct code_row {
  const char* name;
  errc code;
  int cuda_result;  // 0 for launchfit's own codes
};

// The one table from error names to codes. launchfit's own names first: the first row of each code is the
// name an error built from that code carries. Then every CUresult of this toolkit's cuda.h.
constexpr code_row code_table[] = {
    {"LAUNCHFIT_ERROR", errc::other, 0},
    {"LAUNCHFIT_CUDA", errc::cuda, 0},
    {"LAUNCHFIT_NO_DRIVER", errc::no_driver, 0},
    {"LAUNCHFIT_INVALID_ARGUMENT", errc::invalid_argument, 0},
    {"LAUNCHFIT_NOT_FOUND", errc::not_found, 0},
    {"LAUNCHFIT_INVALID_POLICY", errc::invalid_policy, 0},
    {"LAUNCHFIT_UNKNOWN_POLICY", errc::unknown_policy, 0},
    {"LAUNCHFIT_DUPLICATE_POLICY", errc::duplicate_policy, 0},
    {"LAUNCHFIT_BAD_POLICY_STRING", errc::bad_policy_string, 0},
    {"LAUNCHFIT_BAD_POLICY_PARAMETER", errc::bad_policy_parameter, 0},
    {"LAUNCHFIT_INVALID_PLAN", errc::invalid_plan, 0},
    {"LAUNCHFIT_COOPERATIVE_TOO_LARGE", errc::cooperative_too_large, 0},
    {"LAUNCHFIT_INVALID_CLUSTER", errc::cluster, 0},
    {"LAUNCHFIT_UNKNOWN_ARCH", errc::unknown_arch, 0},
    {"LAUNCHFIT_PLUGIN_ERROR", errc::plugin, 0},
    {"LAUNCHFIT_INTERNAL", errc::internal, 0},
    {"LAUNCHFIT_MISSING_WORK", errc::missing_work, 0},
    {"LAUNCHFIT_NOT_PLANNED_YET", errc::not_planned_yet, 0},
    {"LAUNCHFIT_PDL_UNSUPPORTED", errc::pdl_unsupported, 0},
    // Further names launchfit throws.
    {"LAUNCHFIT_INVALID_QUERY", errc::invalid_policy, 0},  // a policy was asked with empty device limits
    {"LAUNCHFIT_INVALID_CONFIG", errc::invalid_plan, 0},   // the calculator refuses a block size or smem
    {"LAUNCHFIT_PLUGIN_REFUSED", errc::plugin, 0},
    {"CUDA_OCC_ERROR_UNKNOWN_DEVICE", errc::unknown_arch, 0},
    {"CUDA_OCC_ERROR_INVALID_INPUT", errc::invalid_plan, 0},
    // CUresult names (cuda.h), as cuGetErrorName spells them.
    {"CUDA_ERROR_INVALID_VALUE", errc::invalid_argument, 1},
    {"CUDA_ERROR_OUT_OF_MEMORY", errc::cuda, 2},
    {"CUDA_ERROR_NOT_INITIALIZED", errc::no_driver, 3},
    {"CUDA_ERROR_DEINITIALIZED", errc::no_driver, 4},
    {"CUDA_ERROR_PROFILER_DISABLED", errc::cuda, 5},
    {"CUDA_ERROR_PROFILER_NOT_INITIALIZED", errc::cuda, 6},
    {"CUDA_ERROR_PROFILER_ALREADY_STARTED", errc::cuda, 7},
    {"CUDA_ERROR_PROFILER_ALREADY_STOPPED", errc::cuda, 8},
    {"CUDA_ERROR_STUB_LIBRARY", errc::no_driver, 34},
    {"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", errc::no_driver, 36},
    {"CUDA_ERROR_DEVICE_UNAVAILABLE", errc::cuda, 46},
    {"CUDA_ERROR_NO_DEVICE", errc::no_driver, 100},
    {"CUDA_ERROR_INVALID_DEVICE", errc::invalid_argument, 101},
    {"CUDA_ERROR_DEVICE_NOT_LICENSED", errc::cuda, 102},
    {"CUDA_ERROR_INVALID_IMAGE", errc::cuda, 200},
    {"CUDA_ERROR_INVALID_CONTEXT", errc::cuda, 201},
    {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", errc::cuda, 202},
    {"CUDA_ERROR_MAP_FAILED", errc::cuda, 205},
    {"CUDA_ERROR_UNMAP_FAILED", errc::cuda, 206},
    {"CUDA_ERROR_ARRAY_IS_MAPPED", errc::cuda, 207},
    {"CUDA_ERROR_ALREADY_MAPPED", errc::cuda, 208},
    {"CUDA_ERROR_NO_BINARY_FOR_GPU", errc::cuda, 209},
    {"CUDA_ERROR_ALREADY_ACQUIRED", errc::cuda, 210},
    {"CUDA_ERROR_NOT_MAPPED", errc::cuda, 211},
    {"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", errc::cuda, 212},
    {"CUDA_ERROR_NOT_MAPPED_AS_POINTER", errc::cuda, 213},
    {"CUDA_ERROR_ECC_UNCORRECTABLE", errc::cuda, 214},
    {"CUDA_ERROR_UNSUPPORTED_LIMIT", errc::cuda, 215},
    {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", errc::cuda, 216},
    {"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", errc::cuda, 217},
    {"CUDA_ERROR_INVALID_PTX", errc::cuda, 218},
    {"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", errc::cuda, 219},
    {"CUDA_ERROR_NVLINK_UNCORRECTABLE", errc::cuda, 220},
    {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", errc::cuda, 221},
    {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", errc::cuda, 222},
    {"CUDA_ERROR_JIT_COMPILATION_DISABLED", errc::cuda, 223},
    {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", errc::cuda, 224},
    {"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", errc::cuda, 225},
    {"CUDA_ERROR_CONTAINED", errc::cuda, 226},
    {"CUDA_ERROR_INVALID_SOURCE", errc::cuda, 300},
    {"CUDA_ERROR_FILE_NOT_FOUND", errc::not_found, 301},
    {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", errc::cuda, 302},
    {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", errc::cuda, 303},
    {"CUDA_ERROR_OPERATING_SYSTEM", errc::cuda, 304},
    {"CUDA_ERROR_INVALID_HANDLE", errc::invalid_argument, 400},
    {"CUDA_ERROR_ILLEGAL_STATE", errc::cuda, 401},
    {"CUDA_ERROR_LOSSY_QUERY", errc::cuda, 402},
    {"CUDA_ERROR_NOT_FOUND", errc::not_found, 500},
    {"CUDA_ERROR_NOT_READY", errc::cuda, 600},
    {"CUDA_ERROR_ILLEGAL_ADDRESS", errc::cuda, 700},
    {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", errc::cuda, 701},
    {"CUDA_ERROR_LAUNCH_TIMEOUT", errc::cuda, 702},
    {"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", errc::cuda, 703},
    {"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", errc::cuda, 704},
    {"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", errc::cuda, 705},
    {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", errc::cuda, 708},
    {"CUDA_ERROR_CONTEXT_IS_DESTROYED", errc::cuda, 709},
    {"CUDA_ERROR_ASSERT", errc::cuda, 710},
    {"CUDA_ERROR_TOO_MANY_PEERS", errc::cuda, 711},
    {"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", errc::cuda, 712},
    {"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", errc::cuda, 713},
    {"CUDA_ERROR_HARDWARE_STACK_ERROR", errc::cuda, 714},
    {"CUDA_ERROR_ILLEGAL_INSTRUCTION", errc::cuda, 715},
    {"CUDA_ERROR_MISALIGNED_ADDRESS", errc::cuda, 716},
    {"CUDA_ERROR_INVALID_ADDRESS_SPACE", errc::cuda, 717},
    {"CUDA_ERROR_INVALID_PC", errc::cuda, 718},
    {"CUDA_ERROR_LAUNCH_FAILED", errc::cuda, 719},
    {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", errc::cooperative_too_large, 720},
    {"CUDA_ERROR_TENSOR_MEMORY_LEAK", errc::cuda, 721},
    {"CUDA_ERROR_NOT_PERMITTED", errc::cuda, 800},
    {"CUDA_ERROR_NOT_SUPPORTED", errc::cuda, 801},
    {"CUDA_ERROR_SYSTEM_NOT_READY", errc::cuda, 802},
    {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", errc::no_driver, 803},
    {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", errc::cuda, 804},
    {"CUDA_ERROR_MPS_CONNECTION_FAILED", errc::cuda, 805},
    {"CUDA_ERROR_MPS_RPC_FAILURE", errc::cuda, 806},
    {"CUDA_ERROR_MPS_SERVER_NOT_READY", errc::cuda, 807},
    {"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", errc::cuda, 808},
    {"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", errc::cuda, 809},
    {"CUDA_ERROR_MPS_CLIENT_TERMINATED", errc::cuda, 810},
    {"CUDA_ERROR_CDP_NOT_SUPPORTED", errc::cuda, 811},
    {"CUDA_ERROR_CDP_VERSION_MISMATCH", errc::cuda, 812},
    {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", errc::cuda, 900},
    {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", errc::cuda, 901},
    {"CUDA_ERROR_STREAM_CAPTURE_MERGE", errc::cuda, 902},
    {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", errc::cuda, 903},
    {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", errc::cuda, 904},
    {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", errc::cuda, 905},
    {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", errc::cuda, 906},
    {"CUDA_ERROR_CAPTURED_EVENT", errc::cuda, 907},
    {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", errc::cuda, 908},
    {"CUDA_ERROR_TIMEOUT", errc::cuda, 909},
    {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", errc::cuda, 910},
    {"CUDA_ERROR_EXTERNAL_DEVICE", errc::cuda, 911},
    {"CUDA_ERROR_INVALID_CLUSTER_SIZE", errc::cluster, 912},
    {"CUDA_ERROR_FUNCTION_NOT_LOADED", errc::cuda, 913},
    {"CUDA_ERROR_INVALID_RESOURCE_TYPE", errc::cuda, 914},
    {"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", errc::cuda, 915},
    {"CUDA_ERROR_KEY_ROTATION", errc::cuda, 916},
    {"CUDA_ERROR_UNKNOWN", errc::cuda, 999},
};

constexpr int sticky_results[] = {
    CUDA_ERROR_ILLEGAL_ADDRESS,       CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_MISALIGNED_ADDRESS,
    CUDA_ERROR_ILLEGAL_INSTRUCTION,   CUDA_ERROR_INVALID_PC,    CUDA_ERROR_HARDWARE_STACK_ERROR,
    CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_ASSERT,        CUDA_ERROR_LAUNCH_TIMEOUT};

const code_row* row_named(std::string_view name) noexcept {
  for (const code_row& r : code_table)
    if (name == r.name) return &r;
  return nullptr;
}

const code_row* row_for_result(int cuda_result) noexcept {
  if (cuda_result == 0) return nullptr;
  for (const code_row& r : code_table)
    if (r.cuda_result == cuda_result) return &r;
  return nullptr;
}

const char* name_of(errc code) noexcept {
  for (const code_row& r : code_table)
    if (r.code == code && r.cuda_result == 0) return r.name;
  return "LAUNCHFIT_ERROR";
}

errc code_for_result(int cuda_result) noexcept {
  if (cuda_result == 0) return errc::other;
  const code_row* r = row_for_result(cuda_result);
  return r ? r->code : errc::cuda;
}

// "CUresult <n>" is how a status this toolkit does not name is spelled; 0 for anything else.
int result_from_unnamed(std::string_view name) noexcept {
  constexpr std::string_view prefix = "CUresult ";
  if (name.substr(0, prefix.size()) != prefix) return 0;
  int value = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last ? value : 0;
}

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

std::string name_for_result(int cuda_result) {
  if (cuda_result == 0) return "CUDA_SUCCESS";
  const code_row* r = row_for_result(cuda_result);
  return r ? std::string(r->name) : "CUresult " + std::to_string(cuda_result);
}

}  // namespace

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::other:
      return "other";
    case errc::cuda:
      return "cuda";
    case errc::no_driver:
      return "no_driver";
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::not_found:
      return "not_found";
    case errc::invalid_policy:
      return "invalid_policy";
    case errc::unknown_policy:
      return "unknown_policy";
    case errc::duplicate_policy:
      return "duplicate_policy";
    case errc::bad_policy_string:
      return "bad_policy_string";
    case errc::bad_policy_parameter:
      return "bad_policy_parameter";
    case errc::invalid_plan:
      return "invalid_plan";
    case errc::cooperative_too_large:
      return "cooperative_too_large";
    case errc::cluster:
      return "cluster";
    case errc::unknown_arch:
      return "unknown_arch";
    case errc::plugin:
      return "plugin";
    case errc::internal:
      return "internal";
    case errc::missing_work:
      return "missing_work";
    case errc::not_planned_yet:
      return "not_planned_yet";
    case errc::pdl_unsupported:
      return "pdl_unsupported";
  }
  return "other";
}

bool is_sticky_cuda_result(int cuda_result) noexcept {
  return std::find(std::begin(sticky_results), std::end(sticky_results), cuda_result) !=
         std::end(sticky_results);
}

error::error(std::string call, std::string cuda_error, std::string message, std::string kernel,
             std::string config)
    : std::runtime_error(format_what(call, cuda_error, message, kernel, config)),
      call_(std::move(call)),
      cuda_error_(std::move(cuda_error)),
      message_(std::move(message)),
      kernel_(std::move(kernel)),
      config_(std::move(config)) {
  if (const code_row* r = row_named(cuda_error_)) {
    code_ = r->code;
    cuda_result_ = r->cuda_result;
  } else if (const int result = result_from_unnamed(cuda_error_)) {
    code_ = code_for_result(result);
    cuda_result_ = result;
  } else if (cuda_error_.compare(0, 4, "cuda") == 0 || cuda_error_.compare(0, 5, "CUDA_") == 0) {
    code_ = errc::cuda;  // a CUDA runtime name (cudaError_t), or a CUresult newer than this table
  }
}

error::error(errc code, std::string call, std::string message, std::string kernel, std::string config)
    : error(std::move(call), name_of(code), std::move(message), std::move(kernel), std::move(config)) {
  code_ = code;
}

error::error(int cuda_result, std::string call, std::string message, std::string kernel, std::string config)
    : error(std::move(call), name_for_result(cuda_result), std::move(message), std::move(kernel),
            std::move(config)) {
  code_ = code_for_result(cuda_result);
  cuda_result_ = cuda_result;
}

namespace detail {

void throw_error(const char* call, const char* cuda_error, const char* message) {
  throw error(call, cuda_error, message);
}

}  // namespace detail

}  // namespace launchfit

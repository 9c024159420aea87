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

#include "driver.hpp"
#include "store/layer_failure.hpp"

namespace launchfit {
namespace {

struct code_row {
  const char* name;
  errc code;
  int cuda_result;  // 0 for launchfit's own codes
  bool sticky;      // the context is unusable after this CUresult
};

// The CUresults launchfit reports itself (so they are named without a driver), those whose code is not
// plain errc::cuda, and the sticky ones. Their names are cuda.h's identifiers; every other status is named
// by the driver (cuGetErrorName).
#define LAUNCHFIT_CU_ROW(result, code) {#result, code, result, false}
#define LAUNCHFIT_CU_STICKY_ROW(result) {#result, errc::cuda, result, true}

// The one table from error names to codes. launchfit's own names first: the first row of each code is the
// name an error built from that code carries. Then names launchfit no longer throws, still read back.
constexpr code_row code_table[] = {
    {"LAUNCHFIT_ERROR", errc::other, 0, false},
    {"LAUNCHFIT_CUDA", errc::cuda, 0, false},
    {"LAUNCHFIT_NO_DRIVER", errc::no_driver, 0, false},
    {"LAUNCHFIT_INVALID_ARGUMENT", errc::invalid_argument, 0, false},
    {"LAUNCHFIT_NOT_FOUND", errc::not_found, 0, false},
    {"LAUNCHFIT_INVALID_POLICY", errc::invalid_policy, 0, false},
    {"LAUNCHFIT_UNKNOWN_POLICY", errc::unknown_policy, 0, false},
    {"LAUNCHFIT_DUPLICATE_POLICY", errc::duplicate_policy, 0, false},
    {"LAUNCHFIT_BAD_POLICY_STRING", errc::bad_policy_string, 0, false},
    {"LAUNCHFIT_BAD_POLICY_PARAMETER", errc::bad_policy_parameter, 0, false},
    {"LAUNCHFIT_INVALID_PLAN", errc::invalid_plan, 0, false},
    {"LAUNCHFIT_COOPERATIVE_TOO_LARGE", errc::cooperative_too_large, 0, false},
    {"LAUNCHFIT_INVALID_CLUSTER", errc::cluster, 0, false},
    {"LAUNCHFIT_UNKNOWN_ARCH", errc::unknown_arch, 0, false},
    {"LAUNCHFIT_PLUGIN_ERROR", errc::plugin, 0, false},
    {"LAUNCHFIT_INTERNAL", errc::internal, 0, false},
    {"LAUNCHFIT_MISSING_WORK", errc::missing_work, 0, false},
    {"LAUNCHFIT_NOT_PLANNED_YET", errc::not_planned_yet, 0, false},
    {"LAUNCHFIT_PDL_UNSUPPORTED", errc::pdl_unsupported, 0, false},
    {"LAUNCHFIT_INVALID_QUERY", errc::invalid_query, 0, false},
    {"LAUNCHFIT_INVALID_CONFIG", errc::invalid_config, 0, false},
    {"LAUNCHFIT_PLUGIN_REFUSED", errc::plugin_refused, 0, false},
    // cuda_occupancy.h's statuses, as earlier launchfit versions named the calculator's refusals.
    {"CUDA_OCC_ERROR_UNKNOWN_DEVICE", errc::unknown_arch, 0, false},
    {"CUDA_OCC_ERROR_INVALID_INPUT", errc::invalid_config, 0, false},
    LAUNCHFIT_CU_ROW(CUDA_ERROR_INVALID_VALUE, errc::invalid_argument),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_OUT_OF_MEMORY, errc::cuda),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_NOT_INITIALIZED, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_DEINITIALIZED, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_STUB_LIBRARY, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_NO_DEVICE, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_INVALID_DEVICE, errc::invalid_argument),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_INVALID_CONTEXT, errc::cuda),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_FILE_NOT_FOUND, errc::not_found),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_INVALID_HANDLE, errc::invalid_argument),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_NOT_FOUND, errc::not_found),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, errc::cuda),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, errc::cooperative_too_large),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, errc::no_driver),
    LAUNCHFIT_CU_ROW(CUDA_ERROR_INVALID_CLUSTER_SIZE, errc::cluster),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_ILLEGAL_ADDRESS),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_LAUNCH_FAILED),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_MISALIGNED_ADDRESS),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_ILLEGAL_INSTRUCTION),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_INVALID_PC),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_HARDWARE_STACK_ERROR),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_INVALID_ADDRESS_SPACE),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_ASSERT),
    LAUNCHFIT_CU_STICKY_ROW(CUDA_ERROR_LAUNCH_TIMEOUT),
};
#undef LAUNCHFIT_CU_ROW
#undef LAUNCHFIT_CU_STICKY_ROW

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

// "CUresult <n>" is how a status is spelled that neither the driver nor the table names; 0 for anything else.
int result_from_unnamed(std::string_view name) noexcept {
  constexpr std::string_view prefix = "CUresult ";
  if (name.substr(0, prefix.size()) != prefix) return 0;
  int value = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last ? value : 0;
}

// A driver name outside the table ("CUDA_ERROR_NOT_READY"), looked up in the loaded driver: 0 when no driver
// is loaded or it names no status so. Only errors built by name come here.
int result_named_by_driver(std::string_view name) noexcept {
  if (name.substr(0, 11) != "CUDA_ERROR_") return 0;
  for (int r = 1; r < 1000; ++r) {
    const char* known = detail::loaded_driver_error_name(static_cast<CUresult>(r));
    if (!known && r == 1) return 0;  // no driver loaded (every driver names CUDA_ERROR_INVALID_VALUE)
    if (known && name == known) return r;
  }
  return 0;
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

}  // namespace

namespace detail {

std::string error_name(CUresult r) {
  if (r == CUDA_SUCCESS) return "CUDA_SUCCESS";
  if (const char* name = loaded_driver_error_name(r)) return name;
  if (const code_row* row = row_for_result(static_cast<int>(r))) return row->name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

}  // namespace detail

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
    case errc::invalid_query:
      return "invalid_query";
    case errc::invalid_config:
      return "invalid_config";
    case errc::plugin_refused:
      return "plugin_refused";
  }
  return "other";
}

namespace detail {

const char* failure_name(layer_failure f) noexcept {
  switch (f) {
    case layer_failure::none:
      return "none";
    case layer_failure::timeout:
      return "timeout";
    case layer_failure::io:
      return "io";
    case layer_failure::protocol:
      return "protocol";
    case layer_failure::refused:
      return "refused";
  }
  return "unknown";
}

}  // namespace detail

bool is_sticky_cuda_result(int cuda_result) noexcept {
  const code_row* r = row_for_result(cuda_result);
  return r && r->sticky;
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
  } else if (const int result = result_named_by_driver(cuda_error_)) {
    code_ = code_for_result(result);
    cuda_result_ = result;
  } else if (cuda_error_.compare(0, 4, "cuda") == 0 || cuda_error_.compare(0, 5, "CUDA_") == 0) {
    code_ = errc::cuda;  // a CUDA runtime name (cudaError_t), or a CUresult newer than this table
  }
}

error::error(std::string call, std::string cuda_error, errc code, int cuda_result, std::string message,
             std::string kernel, std::string config)
    : std::runtime_error(format_what(call, cuda_error, message, kernel, config)),
      call_(std::move(call)),
      cuda_error_(std::move(cuda_error)),
      message_(std::move(message)),
      kernel_(std::move(kernel)),
      config_(std::move(config)),
      code_(code),
      cuda_result_(cuda_result) {}

error::error(errc code, std::string call, std::string message, std::string kernel, std::string config)
    : error(std::move(call), name_of(code), code, 0, std::move(message), std::move(kernel),
            std::move(config)) {}

error::error(int cuda_result, std::string call, std::string message, std::string kernel, std::string config)
    : error(std::move(call), detail::error_name(static_cast<CUresult>(cuda_result)),
            code_for_result(cuda_result), cuda_result, std::move(message), std::move(kernel),
            std::move(config)) {}

error error::with_kernel(std::string kernel, std::string config) const {
  return error(call_, cuda_error_, code_, cuda_result_, message_,
               kernel_.empty() ? std::move(kernel) : kernel_, config_.empty() ? std::move(config) : config_);
}

namespace detail {

void throw_error(const char* call, const char* cuda_error, const char* message) {
  throw error(call, cuda_error, message);
}

void throw_null_kernel(const char* call) { throw error(CUDA_ERROR_INVALID_HANDLE, call, "null kernel function pointer"); }

}  // namespace detail

}  // namespace launchfit

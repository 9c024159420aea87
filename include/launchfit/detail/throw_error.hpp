// SPDX-License-Identifier: MIT
#pragma once
// Internal: throws launchfit::error from a header that does not include launchfit/error.hpp (and its
// <string> and <stdexcept>), such as launchfit/base.hpp.

#include "launchfit/export.hpp"

namespace launchfit::detail {

// Throws launchfit::error(call, cuda_error, message).
[[noreturn]] LAUNCHFIT_API void throw_error(const char* call, const char* cuda_error, const char* message);
// Throws launchfit::error(CUDA_ERROR_INVALID_HANDLE, call, "null kernel function pointer").
[[noreturn]] LAUNCHFIT_API void throw_null_kernel(const char* call);

}  // namespace launchfit::detail

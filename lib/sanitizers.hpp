// SPDX-License-Identifier: MIT
#pragma once
// Internal: which sanitizer this file is built under, detected once for GCC (__SANITIZE_THREAD__) and Clang
// (__has_feature): LAUNCHFIT_THREAD_SANITIZER is defined under ThreadSanitizer.

#if defined(__SANITIZE_THREAD__)
#define LAUNCHFIT_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAUNCHFIT_THREAD_SANITIZER 1
#endif
#endif

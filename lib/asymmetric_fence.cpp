// SPDX-License-Identifier: MIT
#include "asymmetric_fence.hpp"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cerrno>

#if defined(__SANITIZE_THREAD__)
#define LAUNCHFIT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAUNCHFIT_TSAN 1
#endif
#endif

namespace launchfit::detail::asymmetric_fence {
namespace {

#if defined(__linux__) && defined(__NR_membarrier) && !defined(LAUNCHFIT_TSAN)
long membarrier(int command) noexcept { return syscall(__NR_membarrier, command, 0u, 0); }

bool try_register() noexcept {
  const long offered = membarrier(MEMBARRIER_CMD_QUERY);
  if (offered < 0 || (offered & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

bool fence_all() noexcept {
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  // A child of fork() on a kernel whose registration is not inherited: register it, then fence.
  if (errno == EPERM && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
  return false;
}
#else
bool try_register() noexcept { return false; }
bool fence_all() noexcept { return false; }
#endif

}  // namespace

bool register_process() noexcept {
  static const bool registered = try_register();  // thread-safe once; no destructor
  return registered;
}

bool heavy() noexcept { return register_process() && fence_all(); }

}  // namespace launchfit::detail::asymmetric_fence

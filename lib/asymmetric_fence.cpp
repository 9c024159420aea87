// SPDX-License-Identifier: MIT
#include "asymmetric_fence.hpp"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace launchfit::detail::asymmetric_fence {
namespace {

#if defined(__linux__) && defined(__NR_membarrier) && !defined(LAUNCHFIT_THREAD_SANITIZER)
// membarrier(2)'s commands, the kernel's ABI (<linux/membarrier.h> of Linux 4.14 and later names them; older
// headers do not, and a kernel without them answers the query without these bits).
constexpr int query_command = 0;
constexpr int private_expedited = 1 << 3;
constexpr int register_private_expedited = 1 << 4;

long membarrier(int command) noexcept { return syscall(__NR_membarrier, command, 0u, 0); }

bool try_register() noexcept {
  const long offered = membarrier(query_command);
  if (offered < 0 || (offered & private_expedited) == 0) return false;
  return membarrier(register_private_expedited) == 0;  // inherited by a child of fork(), cleared by exec
}

bool fence_all() noexcept { return membarrier(private_expedited) == 0; }
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

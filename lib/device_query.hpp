// SPDX-License-Identifier: MIT
#pragma once
// Internal: which context a launch runs in, by an identity that lasts as long as the context, and that
// context's device limits.

#include <cuda.h>

#include <cstdint>

#include "driver.hpp"
#include "launchfit/detail/launch_request.hpp"
#include "launchfit/device.hpp"

namespace launchfit::detail {

// A CUcontext handle and the identity of the context behind it. The driver reuses handle values (the
// primary context after cudaDeviceReset has the same handle), never identities (cuCtxGetId).
struct context_ref {
  CUcontext handle = nullptr;
  std::uint64_t id = 0;
};

// The calling thread's current context. A thread that has not used the runtime yet gets the runtime
// kernel's primary context (resolving the kernel makes it current). Throws when there is none.
context_ref current_context(const launch_request& r);
// The same where this thread read the current context's identity a moment ago (`id`, from
// current_context_id_if_set()): its handle alone is asked (one driver call, not two), and paired with `id`; where
// no context is current, current_context(r) (another identity).
context_ref current_context(const launch_request& r, std::uint64_t id);
// The identity alone, for a launch that hits: one driver call (cuCtxGetId(NULL) answers for the current context;
// a driver before 12.0 has no identity, and the handle stands for it), none that can throw. False where the thread
// has no current context or the driver fails (current_context() then resolves the kernel, or throws naming the
// call).
// Inline: every launch that hits asks it.
inline bool current_context_id_if_set(const driver_api& d, std::uint64_t& id) noexcept {
  if (__builtin_expect(d.cuCtxGetId != nullptr, 1)) {
    unsigned long long got = 0;
    if (d.cuCtxGetId(nullptr, &got) != CUDA_SUCCESS || got == 0) return false;
    id = got;
    return true;
  }
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return false;
  id = reinterpret_cast<std::uintptr_t>(ctx);
  return true;
}

// Called on every plan miss. When a handle shows up with a new identity, the context it named before was
// destroyed (cudaDeviceReset, cuDevicePrimaryCtxReset, cuCtxDestroy + a new context): every plan, resolved
// function and limit of the old identity is dropped.
void note_context(const context_ref& ctx);

// The context's device limits, queried once per context identity. The reference stays valid for the
// process lifetime.
const device_limits& limits_for(const context_ref& ctx);

}  // namespace launchfit::detail

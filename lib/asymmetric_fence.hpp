// SPDX-License-Identifier: MIT
#pragma once
// Internal: an asymmetric fence between a frequent side and a rare one. The frequent side (a plan reader
// announcing itself on every launch) orders its store before its later loads with a compiler barrier alone
// (light()); the rare side (a pass that frees retired plans) calls heavy(), which makes every running thread of
// the process execute a full memory barrier before it returns (Linux membarrier(2),
// MEMBARRIER_CMD_PRIVATE_EXPEDITED). So either the rare side's later loads see the frequent side's store, or the
// frequent side's later loads see what the rare side stored before heavy(): the store-buffering pattern, with the
// frequent side's locked instruction moved to the rare side.
//
// Where the kernel does not offer it (before Linux 4.14, a sandbox that filters the call) or under
// ThreadSanitizer (which does not model it), register_process() is false and both sides stay sequentially
// consistent.

#include <atomic>

#include "sanitizers.hpp"

namespace launchfit::detail::asymmetric_fence {

// Registers this process for heavy() (once; the first call decides). True where heavy() can be relied on.
bool register_process() noexcept;

// The frequent side's half: orders its earlier stores before its later loads, given the other side's heavy().
inline void light() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Every running thread of this process has executed a full barrier when it returns true. False: not registered,
// or the call failed (a seccomp filter installed since): the caller must not rely on light() then.
bool heavy() noexcept;

}  // namespace launchfit::detail::asymmetric_fence

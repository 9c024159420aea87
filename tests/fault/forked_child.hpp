// SPDX-License-Identifier: MIT
#pragma once
// For tests that fork a multithreaded process and let the child run its exit handlers. fork() copies one
// thread: what the parent's other threads own (their stacks, their thread-local buffers) is unreachable in the
// child by construction, so LeakSanitizer's check at the child's exit would report the parent's threads, not
// launchfit. A child sets in_forked_child; only that check is then skipped, through LeakSanitizer's own hook.
// Include it in one translation unit of a test binary (it defines the hook).

namespace launchfit::fault {
inline volatile bool in_forked_child = false;
}  // namespace launchfit::fault

extern "C" int __lsan_is_turned_off() { return launchfit::fault::in_forked_child ? 1 : 0; }

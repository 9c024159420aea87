// SPDX-License-Identifier: MIT
// Stamps from the future: counted per reader, said once per process (future_stamps.hpp).

#include "future_stamps.hpp"

#include <atomic>
#include <string>

#include "../log_internal.hpp"
#include "../text.hpp"

namespace launchfit::detail {
namespace {

// Plain atomics: nothing to destroy at exit while a writer thread still reads.
std::atomic<std::uint64_t> read_as_unknown[2] = {};
std::atomic<bool> said{false};

constexpr std::size_t source_text_bytes = 512;
constexpr std::size_t first_text_bytes = 1024;

}  // namespace

void note_future_stamps(stamp_reader reader, std::string_view source, std::size_t n,
                        std::string_view first) noexcept {
  if (n == 0) return;
  read_as_unknown[static_cast<int>(reader)].fetch_add(n, std::memory_order_relaxed);
  if (said.exchange(true, std::memory_order_relaxed)) return;
  try {
    logger()->warn(
        "{}: {}{}; stamps this far ahead are said once per process, then only counted "
        "(future_stamps in the layer's statistics)",
        escape_text(source, source_text_bytes), escape_line(first, first_text_bytes),
        n > 1 ? " (and " + std::to_string(n - 1) + " more)" : std::string());
  } catch (...) {  // logging never ends a lookup
  }
}

std::uint64_t future_stamps_read(stamp_reader reader) noexcept {
  return read_as_unknown[static_cast<int>(reader)].load(std::memory_order_relaxed);
}

void reset_future_stamp_warning_for_tests() noexcept { said.store(false, std::memory_order_relaxed); }

}  // namespace launchfit::detail

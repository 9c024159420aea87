// SPDX-License-Identifier: MIT
#pragma once
// Internal: stored_at stamps that a layer read as of unknown age because they lay more than
// max_stored_at_skew_ms ahead of this clock (plan_file_format.hpp: a broken clock or a forgery made to win
// every ranking). Each layer counts them in its stats (layer_stats::future_stamps), and the first one a
// process reads is said in one warning naming where it came from; later ones are only counted.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace launchfit::detail {

enum class stamp_reader : std::uint8_t { file, remote };

// `n` stamps read as unknown by `reader` from `source` ("plan cache file /tmp/p.json", "remote plan store
// redis://h:6379/0 key launchfit:v1:..."; escaped here). `first` says the first of them as the parser did
// (cache_file_contents::clamps: escaped already). Never throws.
void note_future_stamps(stamp_reader reader, std::string_view source, std::size_t n,
                        std::string_view first) noexcept;

// How many stamps `reader`'s layers have read as unknown in this process.
std::uint64_t future_stamps_read(stamp_reader reader) noexcept;

// Tests: the next stamp is said again.
void reset_future_stamp_warning_for_tests() noexcept;

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// The plan-cache file reader: never crashes or throws on any bytes; what it accepts serialises and reads
// back to the same entries; the line-layout fast path agrees with the full parser; no text it accepts
// can forge a log line (no control characters, bounded); sanitize_text and escape_text hold on any bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cache_file.hpp"
#include "plan_json.hpp"
#include "text.hpp"

namespace detail = launchfit::detail;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool clean(const std::string& s, std::size_t max) {
  if (s.size() > max) return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return detail::is_clean_text(s, max);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // Text helpers on any bytes: bounded, idempotent, nothing unsafe left.
  const std::string safe = detail::sanitize_text(text, 256);
  check(safe.size() <= 256 && detail::sanitize_text(safe, 256) == safe && clean(safe, 256));
  // Escaped text is one line of valid UTF-8 with nothing a terminal acts on (a '\' is escaped too, so
  // escaping twice is not the identity).
  const std::string escaped = detail::escape_text(text.substr(0, 4096), 4 * 4096);
  for (unsigned char c : escaped) check(c >= 0x20 && c != 0x7f);
  check(detail::sanitize_text(escaped, escaped.size()) == escaped);

  const auto contents = detail::parse_cache_file(text);
  for (const auto& e : contents.entries) {
    check(clean(e.plan.policy, detail::max_plan_text_bytes) &&
          clean(e.plan.reason, detail::max_plan_text_bytes) &&
          clean(e.plan.warning, detail::max_plan_text_bytes));
    check(e.plan.match == "computed");
    check(e.plan.block_threads >= 1 && e.plan.block_threads <= 1024 && e.plan.blocks_per_sm >= 0);
    // The plan's own JSON reads back to the same plan.
    check(detail::plan_to_json(detail::plan_from_json(detail::plan_to_json(e.plan))) ==
          detail::plan_to_json(e.plan));
  }

  std::vector<detail::stored_entry> fast;
  if (detail::parse_cache_file_lines(text, {}, fast)) {
    check(contents.status == detail::cache_file_status::ok);
    check(contents.skipped == 0);
    check(fast.size() == contents.entries.size());
  }

  if (contents.status != detail::cache_file_status::ok) {
    check(contents.entries.empty());
    check(contents.problem.empty() == (contents.status == detail::cache_file_status::empty));
    return 0;
  }
  const std::string written = detail::serialize_cache_file(contents.entries);
  const auto back = detail::parse_cache_file(written);
  check(back.status == detail::cache_file_status::ok);
  check(back.skipped == 0);
  check(back.entries.size() == contents.entries.size());
  check(detail::serialize_cache_file(back.entries) == written);
  fast.clear();
  check(detail::parse_cache_file_lines(written, {}, fast) && fast.size() == back.entries.size());
  return 0;
}

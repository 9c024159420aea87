// The plan-cache file reader: never crashes or throws on any bytes; what it accepts serialises and reads
// back to the same entries; the line-layout fast path agrees with the full parser.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cache_file.hpp"

namespace detail = launchfit::detail;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto contents = detail::parse_cache_file(text);

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

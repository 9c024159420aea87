// SPDX-License-Identifier: MIT
// policy_from_string(): never crashes, errors are launchfit::error with a column inside the text and a
// bounded, escaped echo of it, and whatever parses round-trips through to_string().

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy's definitions, where policy.hpp leaves them out
#endif
#include "policy_string.hpp"

namespace lf = launchfit;

namespace {

// Every parameter type policies may have, so the fuzzer reaches each parse_field branch.
struct mix_params {
  int count = 1;
  bool on = false;
  double scale = 1.0;
  std::uint64_t bytes = 0;
  std::string mode = "auto";
  static constexpr std::array<const char*, 5> names{"count", "on", "scale", "bytes", "mode"};
};

class mix_policy final : public lf::param_policy<mix_policy, mix_params> {
 public:
  static constexpr const char* policy_name = "fuzz_mix";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query&) const override { return {}; }
};

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  lf::register_policy<mix_policy>();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  try {
    const auto parsed = lf::detail::parse_policy_string(text);
    check(parsed.name_pos < size);
    for (const auto& p : parsed.params) check(p.key_pos < size && p.value_pos < size && !p.value.empty());
  } catch (const lf::detail::syntax_error& e) {
    check(e.pos <= size);
  }

  try {
    const auto p = lf::policy_from_string(text);
    const std::string s = p->to_string();
    const auto again = lf::policy_from_string(s);
    check(again->to_string() == s);
    check(again->name() == p->name());
    check(lf::policy_from_string(again->to_string())->hash() == again->hash());
  } catch (const lf::error& e) {
    // `policy string "<text>" col N: ...` (or `policy string (<n> bytes) col N: ...` when the text is longer
    // than 80 bytes), then at most ~80 bytes of the text, escaped, and a caret: three lines, no control
    // characters, bounded whatever the input.
    const std::string& m = e.message();
    check(m.size() < 4096);
    std::size_t newlines = 0;
    for (char c : m) {
      check(c == '\n' || static_cast<unsigned char>(c) >= 0x20);
      newlines += c == '\n';
    }
    check(newlines == 2);
    const std::string prefix = "policy string ";
    check(m.compare(0, prefix.size(), prefix) == 0);
    // The echo is the second line; the first quotes it whole (`"<echo>" col`) or gives the size (`(n bytes)
    // col`).
    const std::size_t first_end = m.find('\n');
    check(first_end != std::string::npos && m.find('\n', first_end + 1) != std::string::npos);
    const std::string echoed = m.substr(first_end + 3, m.find('\n', first_end + 1) - first_end - 3);
    std::size_t col_at = m.find(" col ", prefix.size());
    if (m.compare(prefix.size(), 1, "\"") == 0) {
      check(m.compare(prefix.size() + 1, echoed.size() + 1, echoed + "\"") == 0);
      col_at = prefix.size() + echoed.size() + 2;
    }
    check(col_at != std::string::npos && m.compare(col_at, 5, " col ") == 0);
    const auto col = std::strtoull(m.c_str() + col_at + 5, nullptr, 10);
    check(col >= 1 && col <= std::min(size, lf::detail::max_policy_text_bytes) + 1);
    const std::string caret_line = m.substr(m.rfind('\n') + 1);
    check(caret_line.size() >= 3 && caret_line.back() == '^');
    check(caret_line.size() - 3 <= echoed.size());
    // Printable ASCII without a backslash is echoed as it is, and then the caret sits under byte col - 1.
    bool plain = size <= 80;
    for (char c : text) plain = plain && c >= 0x20 && c < 0x7f && c != '\\';
    if (plain) {
      check(m.compare(prefix.size(), size + 2, "\"" + std::string(text) + "\"") == 0);
      check(echoed == text);
      check(caret_line == "  " + std::string(col - 1, ' ') + '^');
    }
  }
  return 0;
}

// SPDX-License-Identifier: MIT
// Untrusted text in log lines: whatever bytes a kernel name, device name, policy string, plugin reason or
// override glob holds, a text line stays one line of valid UTF-8 with no control character, a quoted
// value cannot be closed early, and a JSON line parses as one object that gives the text back.

#include <spdlog/common.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "text.hpp"

namespace lf = launchfit;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool valid_utf8_strict(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();  // throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void check_one_safe_line(const std::string& s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    check(u >= 0x20 && u != 0x7f);
  }
  check(valid_utf8_strict(s));
}

// Inside a value quoted by quote_text(), every '"' is escaped: preceded by an odd run of '\'.
void check_quotes_escaped(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '"') continue;
    std::size_t backslashes = 0;
    for (std::size_t k = i; k > 0 && s[k - 1] == '\\'; --k) ++backslashes;
    check(backslashes % 2 == 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t cap = 1 + size % 64;

  const std::string plain = lf::detail::escape_text(text, cap);
  check_one_safe_line(plain);
  check(plain.size() <= 6 * cap + 32);
  const std::string quoted = lf::detail::quote_text(text, cap);
  check_one_safe_line(quoted);
  check(quoted.size() >= 2 && quoted.front() == '"' && quoted.back() == '"');
  check_quotes_escaped(quoted.substr(1, quoted.size() - 2));
  const std::string utf8 = lf::detail::valid_utf8(text, cap);
  check(valid_utf8_strict(utf8));
  if (size <= cap && valid_utf8_strict(text)) check(utf8 == text);

  // format_plan() reads the report synchronously: local plan and device serve (keep_plan() would keep every
  // input for the process's lifetime).
  lf::detail::kept_plan kept;
  kept.kernel_name = text;
  kept.kernel_demangled = text;
  kept.regs_per_thread = 32;
  kept.plan.policy = text;
  kept.plan.reason = text;
  kept.plan.warning = text;
  kept.plan.match = text;
  lf::device_limits device = lf::device_limits::for_arch("H200");
  device.name = text;
  lf::detail::plan_report r;
  r.kept = &kept;
  r.device = &device;
  r.override_glob = text;
  check_one_safe_line(lf::detail::format_plan(r, lf::log_format::text));
  const std::string line = lf::detail::format_plan(r, lf::log_format::json);
  check_one_safe_line(line);
  const auto j = nlohmann::json::parse(line);
  check(j.is_object() && j["event"] == "new_plan");
  if (size <= lf::detail::log_field_cap && valid_utf8_strict(text)) check(j["plan"]["reason"] == text);
  return 0;
}

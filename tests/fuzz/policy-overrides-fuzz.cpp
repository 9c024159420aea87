// SPDX-License-Identifier: MIT
// LAUNCHFIT_POLICY specs and kernel-name matching: the first line is the spec, later lines are kernel
// names. Never crashes; the glob matcher agrees with a plain dynamic-programming reference.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "policy_string.hpp"

namespace lf = launchfit;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool reference_glob(std::string_view pattern, std::string_view text) {
  // match[j]: pattern[0, i) matches text[0, j)
  std::vector<char> match(text.size() + 1, 0), next(text.size() + 1);
  match[0] = 1;
  for (char pc : pattern) {
    next.assign(text.size() + 1, 0);
    for (std::size_t j = 0; j <= text.size(); ++j) {
      if (pc == '*') {
        next[j] = match[j] || (j > 0 && next[j - 1]);
      } else if (j > 0) {
        next[j] = match[j - 1] && (pc == '?' || pc == text[j - 1]);
      }
    }
    match.swap(next);
  }
  return match[text.size()];
}

// What a demangled kernel name looks like: no control characters, (), <> balanced and properly nested, and
// no parenthesised group left at the end once the parameter list is dropped (only a function returning a
// function pointer has one).
bool plausible_kernel_name(std::string_view name) {
  std::string open;
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    if (c == '(' || c == '<') open += c;
    if (c == ')' || c == '>') {
      if (open.empty() || open.back() != (c == ')' ? '(' : '<')) return false;
      open.pop_back();
    }
  }
  if (!open.empty()) return false;
  const auto forms = lf::detail::match_names(name);
  for (const std::string* form : {&forms.with_template_args, &forms.without_template_args})
    if (!form->empty() && form->back() == ')') return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string_view spec = input.substr(0, newline);
  std::vector<std::string_view> names;
  for (std::size_t begin = newline; begin != std::string_view::npos && begin < input.size();) {
    const std::size_t end = input.find('\n', begin + 1);
    names.push_back(input.substr(begin + 1, end == std::string_view::npos ? end : end - begin - 1));
    begin = end;
  }

  bool valid = true;
  try {
    lf::set_policy_overrides(spec);
  } catch (const lf::error& e) {
    valid = false;
    const std::string& m = e.message();
    check(m.size() < 4096);
    for (char c : m) check(c == '\n' || static_cast<unsigned char>(c) >= 0x20);
    const std::string prefix = "policy overrides ";
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
    check(col >= 1 && col <= std::min(spec.size(), lf::detail::max_policy_text_bytes) + 1);
  }
  // A glob refused as never matching matches no plausible kernel name.
  const auto refused = spec.find_first_of("=;") == std::string_view::npos && !spec.empty()
                           ? lf::detail::glob_refusal(spec)
                           : std::nullopt;
  if (refused) check(refused->pos < spec.size());
  for (std::string_view name : names) {
    std::string matched;
    const auto chosen = lf::policy_override_for(name, &matched);
    if (valid && chosen) check(!matched.empty() && spec.find(matched) != std::string_view::npos);
    const auto forms = lf::detail::match_names(name);
    check(forms.with_template_args.size() <= name.size());
    check(forms.without_template_args.size() <= forms.with_template_args.size());
    if (spec.size() <= 64 && name.size() <= 256) {
      check(lf::detail::glob_match(spec, name) == reference_glob(spec, name));
    }
    if (refused && plausible_kernel_name(name)) {
      check(!lf::detail::glob_match(spec, forms.with_template_args));
      check(!lf::detail::glob_match(spec, forms.without_template_args));
    }
  }
  return 0;
}

// LAUNCHFIT_POLICY specs and kernel-name matching: the first line is the spec, later lines are kernel
// names. Never crashes; the glob matcher agrees with a plain dynamic-programming reference.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
    const std::string prefix = "policy overrides \"";
    const std::string& m = e.message();
    check(m.compare(0, prefix.size(), prefix) == 0 &&
          m.compare(prefix.size() + spec.size(), 6, "\" col ") == 0);
    const auto col = std::strtoull(m.c_str() + prefix.size() + spec.size() + 6, nullptr, 10);
    check(col >= 1 && col <= spec.size() + 1);
  }
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
  }
  return 0;
}

// policy_from_string(): never crashes, errors are launchfit::error with a column inside the text, and
// whatever parses round-trips through to_string().

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
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
    // `policy string "<text, control bytes shown as '?'>" col N: ...`, then the text and a caret.
    const std::string& m = e.message();
    const std::string prefix = "policy string \"";
    check(m.compare(0, prefix.size(), prefix) == 0);
    check(m.compare(prefix.size() + size, 6, "\" col ") == 0);
    const auto col = std::strtoull(m.c_str() + prefix.size() + size + 6, nullptr, 10);
    check(col >= 1 && col <= size + 1);
    const std::string caret = "\n  " + std::string(col - 1, ' ') + '^';
    check(m.size() > caret.size() && m.compare(m.size() - caret.size(), caret.size(), caret) == 0);
  }
  return 0;
}

// SPDX-License-Identifier: MIT
// Hostile text for the policy-string and override parsers: each run in a child with a deadline, so a parser
// that is slow on big input (or hangs, or crashes) fails here instead of stalling the run.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "captured_log.hpp"
#include "fault/bounded.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "policy_string.hpp"
#include "settings.hpp"

namespace lf = launchfit;

namespace {

// The deadline a linear parser meets by far on a loaded machine (it takes milliseconds) and a quadratic one
// misses by far (60,000 parameters took ~5 s).
constexpr int deadline_ms = 2000;

// "fixed(p0=1,p1=1,...,p<n-1>=1)": n distinct keys.
std::string many_parameters(int n) {
  std::string text = "fixed(";
  for (int i = 0; i < n; ++i) text += (i ? ",p" : "p") + std::to_string(i) + "=1";
  return text + ")";
}

// 0 when `f` throws a launchfit::error whose message is at most `max_bytes` and holds `needle`.
template <class F>
int refused_briefly(F&& f, const std::string& needle, std::size_t max_bytes = 1000) {
  try {
    f();
  } catch (const lf::error& e) {
    if (e.message().size() > max_bytes) return 3;
    return e.message().find(needle) == std::string::npos ? 4 : 0;
  }
  return 2;
}

}  // namespace

TEST(ParserFault, SixtyThousandParametersParseInLinearTime) {
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    const std::string text = many_parameters(60000);
    const auto parsed = lf::detail::parse_policy_string(text);
    if (parsed.params.size() != 60000 || parsed.params.back().key != "p59999") return 1;
    // The policy knows none of them: refused at the first one, in map order, pointing at it.
    try {
      lf::detail::make_parsed_policy(parsed);
    } catch (const lf::detail::syntax_error& e) {
      return e.pos == 6 ? 0 : 5;
    }
    return 2;
  });
  // A duplicate among many is still found, at its own column.
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    std::string text = many_parameters(60000);
    text.insert(text.size() - 1, ",p123=2");
    try {
      lf::detail::parse_policy_string(text);
    } catch (const lf::detail::syntax_error& e) {
      return e.pos == text.size() - 7 && std::string(e.what()) == "parameter 'p123' given twice" ? 0 : 3;
    }
    return 2;
  });
}

TEST(ParserFault, InputAboveTheCapIsRefusedAtOnceWithAShortMessage) {
  // policy_from_string: 60,000 parameters are ~530 KB, above the 64 KiB cap.
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    const std::string text = many_parameters(60000);
    return refused_briefly([&] { lf::policy_from_string(text); },
                           "col 65537: a policy string of " + std::to_string(text.size()) +
                               " bytes is longer than the 65536 accepted");
  });
  // 10 MB of anything, and 10 MB of ';'.
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    const std::string big(10 << 20, 'x');
    int rc = refused_briefly([&] { lf::policy_from_string(big); }, "is longer than the 65536 accepted");
    if (rc == 0)
      rc = refused_briefly([&] { lf::set_policy_overrides(std::string(10 << 20, ';')); },
                           "policy overrides (10485760 bytes) col 65537");
    return rc;
  });
  // Just under the cap, an error at the very end: a bounded message with a window, not 64 KiB echoed.
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    std::string text = "fixed(block=1" + std::string(lf::detail::max_policy_text_bytes - 14, ' ') + "x";
    return refused_briefly([&] { lf::policy_from_string(text); }, "col 65536: expected ',' or ')', got 'x'",
                           400);
  });
}

// A 10 MB LAUNCHFIT_POLICY is left out whole with one bounded error line (an operator's override never turns a
// launch into an exception), read once, and every lookup answers "no override" at once.
TEST(ParserFault, TenMegabyteLaunchfitPolicyIsIgnoredWithOneShortErrorLine) {
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    launchfit_test::captured_log log(spdlog::level::info);
    setenv("LAUNCHFIT_POLICY", ("k=fixed;" + std::string(10 << 20, ';')).c_str(), 1);
    launchfit::detail::settings_reload_for_tests();  // the environment is read once per process
    for (int i = 0; i < 2; ++i) {
      try {
        if (lf::policy_override_for("k")) return 2;
      } catch (const lf::error&) {
        return 3;
      }
    }
    const std::string t = log.text();
    if (t.size() > 2000) return 4;
    const std::string said = "LAUNCHFIT_POLICY (10485768 bytes) col 65537: LAUNCHFIT_POLICY of 10485768 "
                             "bytes is longer than the 65536 accepted";
    const std::size_t at = t.find(said);
    if (at == std::string::npos) return 5;
    return t.find(said, at + 1) == std::string::npos ? 0 : 6;
  });
}

TEST(ParserFault, ManyEntriesAndRepeatedSeparatorsStayLinear) {
  LAUNCHFIT_EXPECT_BOUNDED(deadline_ms, [] {
    std::string spec;
    for (int i = 0; spec.size() < lf::detail::max_policy_text_bytes - 40; ++i)
      spec += "k" + std::to_string(i) + "=fixed;;;;";
    lf::set_policy_overrides(spec);
    return lf::policy_override_for("k7") && !lf::policy_override_for("nope") ? 0 : 1;
  });
}

namespace {

// Destroyed after the override table would be if the table were an ordinary function-local static: it is
// constructed first, so it is destroyed last.
struct looks_up_at_exit {
  ~looks_up_at_exit() {
    const auto p = lf::policy_override_for("void k<int>(int*)");
    std::fflush(nullptr);
    _exit(p && p->to_string() == "fixed(block=32,grid=0)" ? 0 : 7);
  }
};

}  // namespace

TEST(ParserFault, OverridesStillWorkFromAStaticDestructor) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, [] {
    static looks_up_at_exit probe;  // constructed before the first use of the override table
    lf::set_policy_overrides("k*=fixed(block=32)");
    std::exit(9);  // runs static destructors; the probe's exits 0 when its lookup worked
    return 9;
  });
}

// SPDX-License-Identifier: MIT
// Policy strings, the registry and LAUNCHFIT_POLICY overrides (policy.hpp).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "launchfit/base.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy's definitions, where policy.hpp leaves them out
#endif
#include "captured_log.hpp"
#include "error_of.hpp"
#include "launchfit/detail/policy_params.hpp"
#include "policy_string.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

using launchfit_test::error_of;

std::string parse_error(const std::string& text) {
  return error_of([&] { lf::policy_from_string(text); }).message();
}

}  // namespace

TEST(PolicyString, ParsesNamesAndParameters) {
  EXPECT_EQ(lf::policy_from_string("max_occupancy")->to_string(),
            "max_occupancy(prefer_block=256,block_limit=0)");
  EXPECT_EQ(lf::policy_from_string("max_occupancy()")->to_string(),
            "max_occupancy(prefer_block=256,block_limit=0)");
  EXPECT_EQ(lf::policy_from_string("fixed(block=256,grid=80)")->to_string(), "fixed(block=256,grid=80)");
  EXPECT_EQ(lf::policy_from_string("fixed(block=128)")->to_string(), "fixed(block=128,grid=0)");
  // Whitespace anywhere between tokens, parameters in any order.
  EXPECT_EQ(
      lf::policy_from_string(" \tbytes_in_flight ( target_per_sm = 65536 ,per_thread= 32 ) \n")->to_string(),
      "bytes_in_flight(per_thread=32,target_per_sm=65536,prefer_block=256)");
}

TEST(PolicyString, TakesEveryBuiltInFactoryAsWrittenInCpp) {
  // An operator copies the spec from the code: LAUNCHFIT_POLICY='k=max_occupancy(0)'. Arguments in the
  // factory's order (include/launchfit/base.hpp) make exactly the policy the C++ factory makes.
  struct spelling {
    const char* text;
    std::uint64_t hash;  // the C++ factory's policy
  };
  for (const spelling& c : {
           spelling{"max_occupancy()", lf::max_occupancy().policy_value().hash()},
           spelling{"max_occupancy(0)", lf::max_occupancy(0).policy_value().hash()},
           spelling{"max_occupancy(128, 512)", lf::max_occupancy(128, 512).policy_value().hash()},
           spelling{"bytes_in_flight(32)", lf::bytes_in_flight(32).policy_value().hash()},
           spelling{"bytes_in_flight(32, 32768)", lf::bytes_in_flight(32, 32768).policy_value().hash()},
           spelling{"bytes_in_flight(16, 48K, 128)",
                    lf::bytes_in_flight(16, 48 * 1024, 128).policy_value().hash()},
           spelling{"cooperative()", lf::cooperative().policy_value().hash()},
           spelling{"cooperative(2)", lf::cooperative(2).policy_value().hash()},
           spelling{"cooperative(0, 256)", lf::cooperative(0, 256).policy_value().hash()},
           spelling{"fixed(256)", lf::fixed(256).policy_value().hash()},
           spelling{"fixed(256, 80)", lf::fixed(256, 80).policy_value().hash()},
           spelling{"fixed({16, 16})", lf::fixed({16, 16}).policy_value().hash()},
           spelling{"fixed({32})", lf::fixed(lf::dims{32}).policy_value().hash()},
           spelling{"fixed({32, 8, 2})", lf::fixed({32, 8, 2}).policy_value().hash()},
           spelling{"fixed({16, 16}, {4, 4})", lf::fixed({16, 16}, {4, 4}).policy_value().hash()},
           spelling{"fixed({16,16},{8})", lf::fixed({16, 16}, {8}).policy_value().hash()},
           spelling{"fixed({16, 16}, 8)", lf::fixed({16, 16}, 8).policy_value().hash()},
           spelling{"constant_block()", lf::constant_block_policy{}.hash()},
           spelling{"lf::max_occupancy(0)", lf::max_occupancy(0).policy_value().hash()},
           spelling{" launchfit::fixed( { 32 , 8 } ) ", lf::fixed({32, 8}).policy_value().hash()},
       }) {
    SCOPED_TRACE(c.text);
    const auto p = lf::policy_from_string(c.text);
    EXPECT_EQ(p->hash(), c.hash) << p->to_string();
    // What it prints parses back to itself: the name=value form stays.
    EXPECT_EQ(lf::policy_from_string(p->to_string())->hash(), c.hash);
  }
  EXPECT_EQ(lf::policy_from_string("fixed({16, 16})")->to_string(),
            "fixed_dims(bx=16,by=16,bz=1,gx=0,gy=1,gz=1)");
  // Any registered policy takes its parameters in order: planned's are bx, by, bz, gx, gy, gz, blocks_per_sm.
  EXPECT_EQ(lf::policy_from_string("planned({128}, {0}, 3)")->to_string(),
            "planned(bx=128,by=1,bz=1,gx=0,gy=1,gz=1,blocks_per_sm=3,full_grid=0)");
  EXPECT_EQ(lf::policy_from_string("fixed_dims(64, 4)")->to_string(),
            "fixed_dims(bx=64,by=4,bz=1,gx=0,gy=1,gz=1)");
  // In an override too, beside the name=value form.
  lf::set_policy_overrides(
      "gpuConjugateGradient=max_occupancy(0); transpose*=fixed({32, 8}); k=fixed(block=64)");
  EXPECT_EQ(lf::policy_override_for("void gpuConjugateGradient(int*, float*)")->hash(),
            lf::max_occupancy(0).policy_value().hash());
  EXPECT_EQ(lf::policy_override_for("transpose_tile")->hash(), lf::fixed({32, 8}).policy_value().hash());
  EXPECT_EQ(lf::policy_override_for("k")->hash(), lf::fixed(64).policy_value().hash());
  lf::set_policy_overrides("");
}

TEST(PolicyString, CppSpellingsThatDoNotFitAreRefusedAtTheirColumn) {
  struct bad {
    const char* text;
    const char* expected;
  };
  for (const bad& b : {
           bad{"max_occupancy(0, 512, 3)",
               "col 23: policy 'max_occupancy' takes at most 2 arguments (prefer_block, block_limit)"},
           bad{"fixed(256, block=64)", "col 12: a name=value parameter after values in the factory's order"},
           bad{"fixed(block=64, 256)", "col 17: a value in the factory's order after name=value parameters"},
           bad{"fixed(256, {4, 4})", "col 12: policy 'fixed' has no dims {x, y, z} at argument 2"},
           bad{"max_occupancy({1, 2})", "col 15: policy 'max_occupancy' has no dims {x, y, z} at argument 1"},
           bad{"fixed({1, 2, 3, 4})", "col 17: dims have at most 3 components (x, y, z)"},
           bad{"fixed({16, 16)", "col 14: expected ',' or '}', got ')'"},
           bad{"fixed({16, 16", "col 14: expected ',' or '}' to close the '{' at col 7"},
           bad{"fixed({})", "col 8: expected a number in {x, y, z}, got '}'"},
           bad{"fixed({x})", "col 8: expected a number in {x, y, z}, got 'x'"},
           bad{"fixed({16, 16}, {4, 4}, {1})",
               "col 25: policy 'fixed_dims' has no dims {x, y, z} at argument 7"},
           bad{"cuda::fixed(256)", "col 5: expected '(' or the end, got ':'"},
           bad{"lf::", "col 5: expected a policy name after '::', got end of string"},
           bad{"fixed({16, 99999999999})", "col 12: policy 'fixed_dims': parameter 'by': out of range"},
       }) {
    SCOPED_TRACE(b.text);
    const std::string message = parse_error(b.text);
    EXPECT_NE(message.find(b.expected), std::string::npos) << message;
  }
}

TEST(PolicyString, SizeSuffixesAreBinaryMultiples) {
  EXPECT_EQ(lf::policy_from_string("bytes_in_flight(target_per_sm=32K)")->to_string(),
            "bytes_in_flight(per_thread=16,target_per_sm=32768,prefer_block=256)");
  EXPECT_EQ(lf::policy_from_string("bytes_in_flight(target_per_sm=48KB)")->to_string(),
            "bytes_in_flight(per_thread=16,target_per_sm=49152,prefer_block=256)");
  EXPECT_EQ(lf::policy_from_string("bytes_in_flight(target_per_sm=1M)")->to_string(),
            "bytes_in_flight(per_thread=16,target_per_sm=1048576,prefer_block=256)");
}

TEST(PolicyString, ParsedParametersReachThePolicy) {
  auto p = lf::policy_from_string("bytes_in_flight(per_thread=32)");
  auto typed = std::dynamic_pointer_cast<const lf::bytes_in_flight_policy>(p);
  ASSERT_TRUE(typed);
  EXPECT_EQ(typed->parameters().per_thread, 32);
  EXPECT_EQ(typed->parameters().target_per_sm, 0);
  EXPECT_EQ(p->hash(), lf::bytes_in_flight_policy({32, 0}).hash());
}

namespace {

struct float_params {
  double scale = 1.0;
  static constexpr std::array<const char*, 1> names{"scale"};
};

class float_policy final : public lf::param_policy<float_policy, float_params> {
 public:
  static constexpr const char* policy_name = "test_float";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query&) const override { return {}; }
};

}  // namespace

TEST(PolicyString, FloatParametersRoundTripIncludingInfinities) {
  lf::register_policy<float_policy>();
  // "-1e999" is -inf, which prints as "-inf": the grammar takes signed inf/nan back.
  for (const char* text : {"test_float(scale=1.5e-3)", "test_float(scale=-1e999)", "test_float(scale=inf)",
                           "test_float(scale=nan)", "test_float(scale=+.5)"}) {
    SCOPED_TRACE(text);
    const auto p = lf::policy_from_string(text);
    EXPECT_EQ(lf::policy_from_string(p->to_string())->to_string(), p->to_string());
  }
  EXPECT_EQ(lf::policy_from_string("test_float(scale=-1e999)")->to_string(), "test_float(scale=-inf)");
  lf::unregister_policy("test_float");
}

TEST(PolicyString, RoundTripsEveryBuiltin) {
  for (const char* text :
       {"max_occupancy", "bytes_in_flight",
        "bytes_in_flight(per_thread=64,target_per_sm=16384,prefer_block=256)", "cooperative",
        "cooperative(blocks_per_sm=2,block=512)", "fixed", "fixed(block=96,grid=7)", "constant_block()"}) {
    SCOPED_TRACE(text);
    auto p = lf::policy_from_string(text);
    auto again = lf::policy_from_string(p->to_string());
    EXPECT_EQ(again->to_string(), p->to_string());
    EXPECT_EQ(again->hash(), p->hash());
    EXPECT_EQ(again->name(), p->name());
  }
  for (const auto& name : lf::registered_policies()) {
    SCOPED_TRACE(name);
    auto p = lf::make_policy(name);
    EXPECT_EQ(lf::policy_from_string(p->to_string())->to_string(), p->to_string());
  }
}

TEST(PolicyString, ErrorsNameTheColumnAndShowACaret) {
  EXPECT_EQ(parse_error("bytes_in_flight(per_thread=)"),
            "policy string \"bytes_in_flight(per_thread=)\" col 28: expected a value\n"
            "  bytes_in_flight(per_thread=)\n"
            "                             ^");
  const auto e = error_of([] { lf::policy_from_string("x("); });
  EXPECT_EQ(e.call(), "policy_from_string");
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_BAD_POLICY_STRING");
  EXPECT_NE(std::string(e.what()).find("col 3: expected a parameter name or ')', got end of string"),
            std::string::npos)
      << e.what();
}

TEST(PolicyString, EveryErrorNamesItsColumn) {
  struct bad {
    const char* text;
    const char* expected;  // "col N: ..." prefix of the explanation
  };
  for (const bad& b : {
           bad{"", "col 1: expected a policy name, got end of string"},
           bad{"   ", "col 4: expected a policy name"},
           bad{"1fixed", "col 1: expected a policy name, got '1'"},
           bad{"fixed block", "col 7: expected '(' or the end, got 'b'"},
           bad{"fixed(", "col 7: expected a parameter name or ')'"},
           bad{"fixed(,)", "col 7: expected a parameter name or ')', got ','"},
           bad{"fixed(block=1,)", "col 15: expected a parameter name or ')', got ')'"},
           bad{"fixed(block 256)", "col 13: expected '=' after 'block', got '2'"},
           bad{"fixed(block=256", "col 16: expected ',' or ')', got end of string"},
           bad{"fixed(block=256;grid=1)", "col 16: expected ',' or ')', got ';'"},
           bad{"fixed(block=1,block=2)", "col 15: parameter 'block' given twice"},
           bad{"fixed(block=12q)", "col 15: unexpected 'q' in a number"},
           bad{"fixed(block=1.5K)", "col 16: unexpected 'K' in a number"},
           bad{"fixed(block=-)", "col 14: expected a digit, got ')'"},
           bad{"fixed(block=1e)", "col 15: expected the exponent's digits"},
           bad{"fixed(block=@)", "col 13: expected a value, got '@'"},
           bad{"fixed(block=-x)", "col 14: expected a digit, got 'x'"},
           bad{"fixed(block=99999999999999999999K)", "col 13: number too large"},
           bad{"fixed() x", "col 9: unexpected 'x' after ')'"},
           bad{"fixed(block=\x01)", "col 13: expected a value, got byte 0x01"},
           bad{"nope(a=1)", "col 1: unknown policy 'nope' (known: "},
           bad{"fixed(blok=1)", "col 7: policy 'fixed': unknown parameter 'blok' (known: block, grid)"},
           bad{"fixed(block=abc)",
               "col 13: policy 'fixed': parameter 'block': expected an integer, got 'abc'"},
           bad{"fixed(block=99999999999)", "col 13: policy 'fixed': parameter 'block': out of range"},
       }) {
    SCOPED_TRACE(b.text);
    const std::string message = parse_error(b.text);
    EXPECT_NE(message.find(b.expected), std::string::npos) << message;
    // The caret sits under the named column.
    const auto col = std::stoul(message.substr(message.find(" col ") + 5));
    const auto caret_line = message.substr(message.rfind('\n') + 1);
    EXPECT_EQ(caret_line.size(), col + 2) << message;  // "  " indent, then col - 1 spaces and '^'
    EXPECT_EQ(caret_line.back(), '^');
  }
}

TEST(PolicyString, UnknownNameListsKnownPolicies) {
  const std::string message = parse_error("max_occupency");
  for (const char* known : {"bytes_in_flight", "constant_block", "cooperative", "fixed", "max_occupancy"}) {
    EXPECT_NE(message.find(known), std::string::npos) << message;
  }
}

// ---- registry --------------------------------------------------------------------------------------------

namespace {

struct stride_params {
  int stride = 1;
  bool wide = false;
  static constexpr std::array<const char*, 2> names{"stride", "wide"};
};

class stride_policy final : public lf::param_policy<stride_policy, stride_params> {
 public:
  static constexpr const char* policy_name = "test_stride";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query&) const override {
    lf::plan p;
    p.block = lf::dims{params_.wide ? 512u : 128u, 1, 1};
    return p;
  }
};

}  // namespace

TEST(Registry, HasTheBuiltins) {
  const auto names = lf::registered_policies();
  for (const char* builtin : {"max_occupancy", "bytes_in_flight", "cooperative", "fixed", "constant_block"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), builtin), names.end()) << builtin;
  }
}

TEST(Registry, RegistersByNameAndRefusesDuplicates) {
  lf::register_policy<stride_policy>();
  auto p = lf::policy_from_string("test_stride(wide=true,stride=4)");
  EXPECT_EQ(p->to_string(), "test_stride(stride=4,wide=true)");
  EXPECT_EQ(lf::policy_from_string(p->to_string())->hash(), p->hash());

  const auto dup = error_of([] { lf::register_policy<stride_policy>(); });
  EXPECT_EQ(dup.cuda_error(), "LAUNCHFIT_DUPLICATE_POLICY");
  EXPECT_NE(dup.message().find("'test_stride' is already registered"), std::string::npos) << dup.what();
  EXPECT_NE(dup.message().find("max_occupancy"), std::string::npos) << dup.what();

  // A bad value is a launchfit::error, not the std::invalid_argument of params_assign.
  const auto bad = error_of([] { lf::make_policy("test_stride", {{"wide", "maybe"}}); });
  EXPECT_EQ(bad.cuda_error(), "LAUNCHFIT_BAD_POLICY_PARAMETER");
  EXPECT_NE(bad.message().find("expected true or false"), std::string::npos) << bad.what();

  EXPECT_TRUE(lf::unregister_policy("test_stride"));
  EXPECT_FALSE(lf::unregister_policy("test_stride"));
  EXPECT_EQ(error_of([] { lf::make_policy("test_stride"); }).cuda_error(), "LAUNCHFIT_UNKNOWN_POLICY");
}

TEST(Registry, BuiltinNamesCannotBeTaken) {
  const auto e = error_of([] {
    lf::register_policy("fixed", [](const std::map<std::string, std::string>&) {
      return std::shared_ptr<const lf::policy>(std::make_shared<const lf::fixed_policy>());
    });
  });
  EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_DUPLICATE_POLICY");
}

// ---- overrides -------------------------------------------------------------------------------------------

TEST(PolicyOverrides, MatchNamesDropParametersReturnTypeAndTemplateArgs) {
  auto n = lf::detail::match_names("void reduce<float>(float const*, int)");
  EXPECT_EQ(n.with_template_args, "reduce<float>");
  EXPECT_EQ(n.without_template_args, "reduce");
  n = lf::detail::match_names("saxpy(float, float const*, float*, int)");
  EXPECT_EQ(n.with_template_args, "saxpy");
  n = lf::detail::match_names("void ns::tile<float, 4, (anonymous namespace)::op>(float*)");
  EXPECT_EQ(n.with_template_args, "ns::tile<float, 4, (anonymous namespace)::op>");
  EXPECT_EQ(n.without_template_args, "ns::tile");
  n = lf::detail::match_names("(anonymous namespace)::k(int)");
  EXPECT_EQ(n.with_template_args, "(anonymous namespace)::k");
  n = lf::detail::match_names("plain_c_kernel");
  EXPECT_EQ(n.with_template_args, "plain_c_kernel");
}

TEST(PolicyOverrides, Globs) {
  using lf::detail::glob_match;
  EXPECT_TRUE(glob_match("reduce*", "reduce<float>"));
  EXPECT_TRUE(glob_match("reduce*", "reduce"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("r?duce", "reduce"));
  EXPECT_TRUE(glob_match("*::k*", "ns::kernel"));
  EXPECT_TRUE(glob_match("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(glob_match("reduce", "reduce2"));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_FALSE(glob_match("a*b", "ac"));
  // Found by policy-overrides-fuzz: a '*' in the pattern facing a '*' in the name was taken as a literal,
  // so "*\f\f" did not match "*~\f\f".
  EXPECT_TRUE(glob_match("*\f\f", "*~\f\f"));
  EXPECT_TRUE(glob_match("*b", "*ab"));
  EXPECT_TRUE(glob_match("ns::*", "ns::*x"));
  EXPECT_FALSE(glob_match("*b", "*a"));
  // No exponential blow-up on adversarial patterns.
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*b", std::string(5000, 'a')));
}

// A glob and a kernel name are untrusted: "*" then 5,000 'a's then "b" against a name of 200,000 'a's took
// O(|glob| x |name|), seconds per kernel's first launch with a dozen such globs. Linear now (a '*'-only glob):
// the matcher's own count of its steps is bounded by the sizes it was given (the backtracking matcher takes
// about a billion steps a call here).
TEST(PolicyOverrides, AGlobIsMatchedInLinearTime) {
  using lf::detail::glob_match;
  const std::string glob = "*" + std::string(5000, 'a') + "b";
  const std::string name(200000, 'a');
  const std::string unanchored = glob + "*";  // not failed by its last character: the run is searched for
  const std::uint64_t before = lf::detail::glob_steps();
  for (int i = 0; i < 12; ++i) EXPECT_FALSE(glob_match(unanchored, name));
  EXPECT_FALSE(glob_match(glob, name));
  EXPECT_TRUE(glob_match(glob, name + "b"));
  const std::uint64_t steps = lf::detail::glob_steps() - before;
  EXPECT_GT(steps, 12u * name.size()) << "the run was not searched for: the bound below says nothing";
  EXPECT_LE(steps, 14u * 4u * (unanchored.size() + name.size() + 1));
}

// The linear matcher agrees with a plain recursive one on every small glob and name over a two-letter alphabet.
bool reference_glob(std::string_view p, std::string_view t) {
  if (p.empty()) return t.empty();
  if (p[0] == '*') return reference_glob(p.substr(1), t) || (!t.empty() && reference_glob(p, t.substr(1)));
  return !t.empty() && (p[0] == '?' || p[0] == t[0]) && reference_glob(p.substr(1), t.substr(1));
}
TEST(PolicyOverrides, GlobsAgreeWithAPlainMatcher) {
  const auto all = [](int length, const char* alphabet) {
    std::vector<std::string> out{""};
    for (int l = 1; l <= length; ++l) {
      std::vector<std::string> next;
      for (const std::string& s : out)
        if (static_cast<int>(s.size()) == l - 1)
          for (const char* c = alphabet; *c; ++c) next.push_back(s + *c);
      out.insert(out.end(), next.begin(), next.end());
    }
    return out;
  };
  const auto globs = all(5, "ab*?");
  const auto names = all(6, "ab*");
  std::size_t checked = 0;
  for (const std::string& g : globs)
    for (const std::string& n : names) {
      ASSERT_EQ(lf::detail::glob_match(g, n), reference_glob(g, n)) << "glob '" << g << "', name '" << n << "'";
      ++checked;
    }
  EXPECT_GT(checked, 1000000u);
}

// The same with '?' in the glob's runs: "*", 2,500 'a's, '?', 2,500 'a's, "b" against 200,000 'a's backtracked in
// O(|glob| x |name|) (about a billion comparisons, seconds per first launch); bit-parallel now, about 16 million
// word operations: the matcher's count of its steps is bounded by |name| x the run's 64-bit words.
TEST(PolicyOverrides, AGlobWithAnyCharacterIsMatchedWithoutBacktracking) {
  using lf::detail::glob_match;
  const std::string run = std::string(2500, 'a') + "?" + std::string(2500, 'a');
  const std::string glob = "*" + run + "b";
  const std::string name(200000, 'a');
  const std::uint64_t before = lf::detail::glob_steps();
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(glob_match(glob, name));
  // The run searched through the whole name and not found (the anchored tail alone fails the glob above at
  // once): a billion comparisons each when backtracking, about 16 million word operations now.
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(glob_match("*" + run + "b*", name));
  EXPECT_TRUE(glob_match(glob, name + "b"));
  EXPECT_TRUE(glob_match("*" + run + "*", name));
  EXPECT_FALSE(glob_match("*" + run + "*", std::string(5000, 'a')));  // one character short
  EXPECT_TRUE(glob_match("x*" + run + "*?y", "x" + std::string(5001, 'a') + "zy"));
  // Ten searches of a 5,001-character run (79 words) through at most 200,001 characters, and the tables.
  const std::uint64_t steps = lf::detail::glob_steps() - before;
  const std::uint64_t words = (run.size() + 63) / 64;
  EXPECT_GT(steps, 3u * (name.size() - run.size()) * words) << "the runs were not searched for";
  EXPECT_LE(steps, 10u * ((name.size() + 2) * words + 4 * glob.size() + 8 * 256 * words));
  // Runs longer than one 64-bit word, with '?' on both sides of a word's edge, as the plain matcher says.
  std::string long_run(200, 'c');
  long_run[63] = long_run[64] = long_run[127] = '?';
  const std::string long_glob = "*" + long_run + "*d";
  for (std::size_t e = 0; e <= 300; e += 3) {
    std::string hay = std::string(300, 'c') + "d";
    hay[e] = 'e';
    EXPECT_EQ(glob_match(long_glob, hay), reference_glob(long_glob, hay)) << "'e' at " << e;
  }
}

TEST(PolicyOverrides, FirstMatchWins) {
  lf::set_policy_overrides("reduce*=bytes_in_flight(per_thread=32);saxpy=fixed(block=256);*=max_occupancy");
  std::string matched;
  auto p = lf::policy_override_for("void reduce<float>(float const*, int)", &matched);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->to_string(), "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
  EXPECT_EQ(matched, "reduce*");
  p = lf::policy_override_for("saxpy(float, float const*, float*, int)", &matched);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->to_string(), "fixed(block=256,grid=0)");
  EXPECT_EQ(matched, "saxpy");
  p = lf::policy_override_for("saxpy2(int)", &matched);
  ASSERT_TRUE(p);
  EXPECT_EQ(matched, "*");

  lf::set_policy_overrides(" reduce<float> = fixed(block=64) ; reduce<double>=fixed(block=32);");
  EXPECT_EQ(lf::policy_override_for("void reduce<float>(float const*, int)")->to_string(),
            "fixed(block=64,grid=0)");
  EXPECT_EQ(lf::policy_override_for("void reduce<double>(double const*, int)")->to_string(),
            "fixed(block=32,grid=0)");
  EXPECT_FALSE(lf::policy_override_for("void reduce<int>(int const*, int)"));
  // Globs see the qualified name: a namespaced kernel needs "ns::" or a leading '*'.
  lf::set_policy_overrides("reduce*=fixed(block=64);*::scan*=fixed(block=128)");
  EXPECT_FALSE(lf::policy_override_for("void ns::reduce<float>(float const*, int)"));
  EXPECT_EQ(lf::policy_override_for("void ns::scan<1>(int*)")->to_string(), "fixed(block=128,grid=0)");

  lf::set_policy_overrides("");
  EXPECT_FALSE(lf::policy_override_for("void reduce<float>(float const*, int)"));
}

TEST(PolicyOverrides, BadEntriesNameTheColumnInTheWholeSpec) {
  auto message = [](const char* spec) { return error_of([&] { lf::set_policy_overrides(spec); }).message(); };
  std::string m = message("saxpy=fixed(block=256);reduce*=bytes_in_flight(per_thread=)");
  EXPECT_NE(m.find("col 59: expected a value"), std::string::npos) << m;
  m = message("saxpy=fixed(block=256); oops ;x=fixed");
  EXPECT_NE(m.find("col 25: expected <kernel glob>=<policy>, found no '='"), std::string::npos) << m;
  m = message("  =fixed");
  EXPECT_NE(m.find("col 3: expected a kernel name glob before '='"), std::string::npos) << m;
  m = message("a=fixed;b=nope");
  EXPECT_NE(m.find("col 11: unknown policy 'nope'"), std::string::npos) << m;
  m = message("a=fixed(grid=x)");
  EXPECT_NE(m.find("col 14: policy 'fixed': parameter 'grid'"), std::string::npos) << m;

  // A failed set leaves the previous overrides in place.
  lf::set_policy_overrides("k=fixed(block=32)");
  EXPECT_THROW(lf::set_policy_overrides("k=fixed(block=)"), lf::error);
  EXPECT_EQ(lf::policy_override_for("k")->to_string(), "fixed(block=32,grid=0)");
}

TEST(PolicyOverrides, RegistryAndOverridesAreThreadSafe) {
  lf::set_policy_overrides("reduce*=fixed(block=128)");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      const std::string own = "test_thread_" + std::to_string(t);
      for (int i = 0; i < 200; ++i) {
        lf::register_policy(own, [](const std::map<std::string, std::string>&) {
          return std::shared_ptr<const lf::policy>(std::make_shared<const lf::constant_block_policy>());
        });
        if (lf::policy_from_string(own + "()")->name() != "constant_block") ++failures;
        if (!lf::policy_override_for("void reduce<float>(float const*, int)")) ++failures;
        if (lf::registered_policies().size() < 5) ++failures;
        if (!lf::unregister_policy(own)) ++failures;
        if (t == 0 && i % 50 == 0)
          lf::set_policy_overrides("reduce*=fixed(block=" + std::to_string(32 + i) + ")");
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// LAUNCHFIT_POLICY is read once per process: each test below runs in a fresh child process.
class PolicyOverridesEnv : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PolicyOverridesEnv, ReadOnFirstUse) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_POLICY", "reduce*=bytes_in_flight(per_thread=32);saxpy=fixed(block=256)", 1);
        std::string matched;
        auto p = lf::policy_override_for("void reduce<float>(float const*, int)", &matched);
        const bool ok = p &&
                        p->to_string() == "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)" &&
                        matched == "reduce*" && !lf::policy_override_for("scan(int*)");
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// An operator's override never turns a launch that works into an exception: a bad entry of LAUNCHFIT_POLICY
// is left out with one error line pointing at its column in the whole variable, and the other entries apply.
// (Every lookup threw, for every kernel, the ones no entry names included.)
TEST_F(PolicyOverridesEnv, ABadEntryIsLoggedOnceAtItsColumnAndTheOthersApply) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_POLICY",
               "saxpy=fixed(block=256);reduce*=bytes_in_flight(per_thread=);k1=fixed(block=1e999);"
               "k2=no_such_policy();noequals;scan*=max_occupancy(0)",
               1);
        launchfit_test::captured_log log(spdlog::level::info);
        bool ok = true;
        for (int i = 0; i < 3; ++i) {
          try {
            std::string matched;
            const auto saxpy = lf::policy_override_for("saxpy", &matched);
            ok = ok && saxpy && saxpy->to_string() == "fixed(block=256,grid=0)" && matched == "saxpy";
            ok = ok && !lf::policy_override_for("void reduce<float>(float const*, int)");
            ok = ok && !lf::policy_override_for("k1") && !lf::policy_override_for("k2");
            const auto scan = lf::policy_override_for("scan(int*)");
            ok = ok && scan && scan->to_string().rfind("max_occupancy(", 0) == 0;
            ok = ok && !lf::policy_override_for("other_kernel");
          } catch (const std::exception& e) {
            std::fprintf(stderr, "threw: %s\n", e.what());
            ok = false;
          }
        }
        const std::string t = log.text();
        int lines = 0;
        for (std::size_t at = t.find("LAUNCHFIT_POLICY: an entry is ignored"); at != std::string::npos;
             at = t.find("LAUNCHFIT_POLICY: an entry is ignored", at + 1))
          ++lines;
        ok = ok && lines == 4 && t.find("col 59: expected a value") != std::string::npos &&
             t.find("unknown policy 'no_such_policy'") != std::string::npos &&
             t.find("found no '='") != std::string::npos;
        if (!ok) std::fprintf(stderr, "%d lines:\n%s\n", lines, t.c_str());
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// A registered factory that throws its own exception (std::out_of_range from a std::stoi of its own, not a
// launchfit::error) makes a bad entry like any other: set_policy_overrides() refuses it with a launchfit::error at
// the policy's column, and in LAUNCHFIT_POLICY it is left out with one error line while the other entries
// apply. (The factory's exception escaped every lookup of every kernel.)
namespace {

void register_throwing_factory() {
  lf::register_policy("throws_its_own", [](const std::map<std::string, std::string>& params)
                                            -> std::shared_ptr<const lf::policy> {
    const auto it = params.find("n");
    (void)std::stoi(it == params.end() ? std::string("99999999999999999999") : it->second);
    throw std::runtime_error("the factory's own failure");
  });
}

}  // namespace

TEST_F(PolicyOverridesEnv, AFactoryThatThrowsItsOwnExceptionIsABadEntry) {
  EXPECT_EXIT(
      {
        register_throwing_factory();
        bool ok = true;
        try {
          lf::set_policy_overrides("a=fixed(block=64);bad=throws_its_own()");
          std::fprintf(stderr, "set_policy_overrides took it\n");
          ok = false;
        } catch (const lf::error& e) {
          const std::string m = e.what();
          ok = m.find("col 23: the policy could not be made: stoi") != std::string::npos;
          if (!ok) std::fprintf(stderr, "message: %s\n", m.c_str());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "escaped as a %s: %s\n", typeid(e).name(), e.what());
          ok = false;
        }
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_POLICY", "bad=throws_its_own(n=1);saxpy=fixed(block=128)", 1);  // read on first use
        register_throwing_factory();
        launchfit_test::captured_log log(spdlog::level::info);
        bool ok = true;
        try {
          const auto saxpy = lf::policy_override_for("saxpy");
          ok = saxpy && saxpy->to_string() == "fixed(block=128,grid=0)" && !lf::policy_override_for("bad");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "a lookup threw: %s\n", e.what());
          ok = false;
        }
        const std::string t = log.text();
        ok = ok && t.find("LAUNCHFIT_POLICY: an entry is ignored") != std::string::npos &&
             t.find("the policy could not be made: the factory's own failure") != std::string::npos;
        if (!ok) std::fprintf(stderr, "%s\n", t.c_str());
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// ---- hostile text ----------------------------------------------------------------------------------------

namespace {

// The caret line's '^' column and the echoed line above it.
struct caret_view {
  std::string line;
  std::size_t caret = 0;
};

caret_view caret_of(const std::string& message) {
  const auto last = message.rfind('\n');
  const auto before = message.rfind('\n', last - 1);
  return {message.substr(before + 3, last - before - 3), message.size() - last - 1 - 3};
}

}  // namespace

TEST(PolicyString, LongInputsEchoAWindowAroundTheColumnNotTheWholeText) {
  // 20,000 bytes, the error at byte 10,012: the message quotes ~80 bytes of it, once, and its size.
  const std::string text = "fixed(block=" + std::string(10000, '1') + "q" + std::string(9987, '2') + ")";
  const std::string m = parse_error(text);
  EXPECT_LT(m.size(), 400u) << m.size();
  EXPECT_EQ(m.rfind("policy string (20001 bytes) col 10013: unexpected 'q' in a number", 0), 0u) << m;
  const caret_view v = caret_of(m);
  EXPECT_EQ(v.line.rfind("...", 0), 0u) << v.line;
  EXPECT_EQ(v.line.substr(v.line.size() - 3), "...") << v.line;
  ASSERT_LT(v.caret, v.line.size()) << m;
  EXPECT_EQ(v.line[v.caret], 'q') << m;
  // At the very start and the very end the window is cut on one side only.
  const std::string head = parse_error("@" + std::string(5000, 'a'));
  EXPECT_EQ(caret_of(head).caret, 0u) << head;
  EXPECT_EQ(caret_of(head).line[0], '@') << head;
  const std::string tail = parse_error("fixed(block=1" + std::string(5000, ' '));
  EXPECT_NE(tail.find("col 5014: expected ',' or ')', got end of string"), std::string::npos) << tail;
  EXPECT_EQ(caret_of(tail).caret, caret_of(tail).line.size()) << tail;
}

TEST(PolicyString, EchoedTextEscapesControlCharactersAndInvalidUtf8) {
  struct shown {
    std::string text, line;  // the input and its echo
    std::size_t caret;       // where the caret must be in the echo
  };
  for (const shown& s : {
           shown{"fixed(block=\x1b[2J)", "fixed(block=\\x1b[2J)", 12},
           shown{std::string("fixed(\0block=1)", 15), "fixed(\\x00block=1)", 6},
           shown{"fixed(\tblock=1,\n x)", "fixed(\\tblock=1,\\n x)", 20},
           shown{"fixed(block=1,\xff=2)", "fixed(block=1,\\xff=2)", 14},
           shown{"f\xc3\xafxed(block=1)", "f\xc3\xafxed(block=1)", 1},  // valid UTF-8 as it is
           shown{"fixed(block=1)\xe2\x80\xae"
                 "x",
                 "fixed(block=1)\\u202ex", 14},  // a bidi override
           shown{"fixed(block=1) \xc2\x9b"
                 "x",
                 "fixed(block=1) \\u009bx", 15},  // C1 CSI
       }) {
    SCOPED_TRACE(s.line);
    const std::string m = parse_error(s.text);
    for (char c : m) EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << m;
    const caret_view v = caret_of(m);
    EXPECT_EQ(v.line, s.line) << m;
    EXPECT_EQ(v.caret, s.caret) << m;
  }
  // Unicode in a name is refused at its first byte, named as a byte.
  EXPECT_NE(parse_error("f\xc3\xafxed").find("col 2: expected '(' or the end, got byte 0xc3"),
            std::string::npos);
}

TEST(PolicyString, LongerThanTheCapIsRefusedNotCut) {
  const std::string fits = "max_occupancy" + std::string(lf::detail::max_policy_text_bytes - 13, ' ');
  EXPECT_EQ(lf::policy_from_string(fits)->name(), "max_occupancy");
  const std::string m = parse_error(fits + " ");
  EXPECT_NE(m.find("policy string (65537 bytes) col 65537: a policy string of 65537 bytes is longer than the "
                   "65536 accepted"),
            std::string::npos)
      << m;
  EXPECT_LT(m.size(), 400u);
}

TEST(PolicyString, HostileNumbers) {
  struct bad {
    const char* text;
    const char* expected;
  };
  for (const bad& b : {
           bad{"fixed(block=1e999)",
               "col 13: policy 'fixed': parameter 'block': expected an integer, got '1e999'"},
           bad{"fixed(block=0x10)", "col 14: unexpected 'x' in a number"},
           bad{"fixed(block=99999999999K)",
               "col 13: policy 'fixed': parameter 'block': out of range: "
               "'102399999998976'"},
           bad{"fixed(block=99999999999999999999999)",
               "col 13: policy 'fixed': parameter 'block': out of range"},
           bad{"fixed(block=18014398509481984M)", "col 13: number too large"},
           bad{"fixed(grid=--1)", "col 13: expected a digit, got '-'"},
       }) {
    SCOPED_TRACE(b.text);
    const std::string m = parse_error(b.text);
    EXPECT_NE(m.find(b.expected), std::string::npos) << m;
  }
  // -0 is 0 and +64 is 64, as the grammar says.
  EXPECT_EQ(lf::policy_from_string("fixed(block=+64,grid=-0)")->to_string(), "fixed(block=64,grid=0)");
}

TEST(PolicyString, FloatParametersDoNotDependOnTheLocaleAndOverflowToInfinity) {
  lf::register_policy<float_policy>();
  auto scale = [](const char* text) {
    return std::dynamic_pointer_cast<const float_policy>(lf::policy_from_string(text))->parameters().scale;
  };
  EXPECT_EQ(scale("test_float(scale=1e999)"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(scale("test_float(scale=-1e999)"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(scale("test_float(scale=1e-999)"), 0.0);
  EXPECT_EQ(scale("test_float(scale=+2.5)"), 2.5);
  // A C++ caller's map is not held to the grammar: no hex, no leading blanks.
  for (const char* value : {"0x10", " 5", "5 ", "1,5"}) {
    SCOPED_TRACE(value);
    EXPECT_EQ(error_of([&] {
                lf::make_policy("test_float", {{"scale", value}});
              }).cuda_error(),
              "LAUNCHFIT_BAD_POLICY_PARAMETER");
  }
  lf::unregister_policy("test_float");
}

TEST(PolicyString, ParameterErrorsCarryTheirKeyNotJustAMessage) {
  // A factory's error names the parameter as data; the column follows the data, whatever the message says.
  lf::register_policy(
      "test_keyed", [](const std::map<std::string, std::string>& kv) -> std::shared_ptr<const lf::policy> {
        if (kv.count("b")) {
          throw lf::detail::parameter_error(
              "test_keyed", lf::detail::bad_parameter("b", lf::detail::bad_parameter::part::value,
                                                      "parameter 'b' must differ from 'a'"));
        }
        return std::make_shared<const lf::constant_block_policy>();
      });
  std::string m = parse_error("test_keyed(a=1,b=2)");
  EXPECT_NE(m.find("col 18: policy 'test_keyed': parameter 'b' must differ from 'a'"), std::string::npos)
      << m;
  // Any other error of a factory points at the policy's name.
  lf::unregister_policy("test_keyed");
  lf::register_policy("test_keyed",
                      [](const std::map<std::string, std::string>&) -> std::shared_ptr<const lf::policy> {
                        throw std::invalid_argument("parameter 'a': unknown parameter 'a'");
                      });
  m = parse_error("  test_keyed(a=1)");
  EXPECT_NE(m.find("col 3: policy 'test_keyed': parameter 'a'"), std::string::npos) << m;
  lf::unregister_policy("test_keyed");
}

TEST(PolicyString, AFactorysLongOrControlCharacterMessageIsEscapedAndCut) {
  lf::register_policy("test_noisy",
                      [](const std::map<std::string, std::string>&) -> std::shared_ptr<const lf::policy> {
                        throw std::invalid_argument("line one\n\x1b[2J" + std::string(5000, 'z'));
                      });
  const std::string m = parse_error("test_noisy");
  EXPECT_LT(m.size(), 1300u) << m.size();
  EXPECT_NE(m.find("col 1: policy 'test_noisy': line one\\n\\x1b[2Jzzz"), std::string::npos) << m;
  EXPECT_NE(m.find("zzz...(5034 bytes)\n  test_noisy\n  ^"), std::string::npos) << m;
  for (char c : m) EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << m;
  lf::unregister_policy("test_noisy");
}

TEST(PolicyString, NegativeParametersParseAndAreRefusedWhenThePlanIsMade) {
  // As prefer_block=-1: the policy string parses, choose() refuses it (policy-test.cpp checks the messages).
  for (const char* text : {"cooperative(block=-1)", "cooperative(blocks_per_sm=-1)",
                           "bytes_in_flight(target_per_sm=-5)", "bytes_in_flight(per_thread=-1)"}) {
    SCOPED_TRACE(text);
    EXPECT_NO_THROW(lf::policy_from_string(text));
  }
}

TEST(PolicyOverrides, GlobsThatCanNeverMatchAreRefusedWithAColumn) {
  struct bad {
    std::string spec;
    const char* expected;
  };
  for (const bad& b : {
           bad{"void reduce*=fixed",
               "col 5: the glob cannot match: kernel names are matched without their "
               "return type ('void')"},
           bad{"a=fixed; saxpy(float, float const*, float*, int)=fixed",
               "col 15: the glob cannot match: kernel names are matched without their parameter list"},
           bad{"k*)=fixed", "col 3: the glob cannot match"},
           bad{"(anonymous namespace)=fixed", "col 1: the glob cannot match"},
           bad{std::string("k\0x=fixed", 9),
               "col 2: the glob cannot match: a kernel name never holds byte 0x00"},
           bad{"k\tx=fixed", "col 2: the glob cannot match: a kernel name never holds byte 0x09"},
       }) {
    SCOPED_TRACE(b.expected);
    const std::string m = error_of([&] { lf::set_policy_overrides(b.spec); }).message();
    EXPECT_NE(m.find(b.expected), std::string::npos) << m;
    const auto col = std::stoul(m.substr(m.find(" col ") + 5));
    EXPECT_EQ(caret_of(m).caret + 1, col) << m;
  }
  // '(' ',' and spaces do appear in match names: these globs stay.
  lf::set_policy_overrides(
      "(anonymous namespace)::k=fixed(block=32);reduce<float, 4>=fixed(block=64);* scan=fixed(block=96);"
      "ns::tile<float, 4, (anonymous namespace)::op>=fixed(block=128)");
  EXPECT_EQ(lf::policy_override_for("(anonymous namespace)::k(int)")->to_string(), "fixed(block=32,grid=0)");
  EXPECT_EQ(lf::policy_override_for("void reduce<float, 4>(float const*)")->to_string(),
            "fixed(block=64,grid=0)");
  EXPECT_EQ(
      lf::policy_override_for("void ns::tile<float, 4, (anonymous namespace)::op>(float*)")->to_string(),
      "fixed(block=128,grid=0)");
  lf::set_policy_overrides("");
}

TEST(PolicyOverrides, SetBumpsTheGenerationAndAFailedSetDoesNot) {
  lf::set_policy_overrides("");
  const std::uint64_t g = lf::detail::policy_overrides_generation();
  lf::set_policy_overrides("k=fixed");
  EXPECT_EQ(lf::detail::policy_overrides_generation(), g + 1);
  EXPECT_THROW(lf::set_policy_overrides("k=fixed("), lf::error);
  EXPECT_EQ(lf::detail::policy_overrides_generation(), g + 1);
  lf::set_policy_overrides("k=fixed");  // the same text still counts: plans are re-made, not compared
  EXPECT_EQ(lf::detail::policy_overrides_generation(), g + 2);
  lf::set_policy_overrides("");
}

TEST(PolicyOverrides, HostileSpecs) {
  lf::set_policy_overrides(std::string(60000, ';'));
  EXPECT_FALSE(lf::policy_override_for("k"));
  const std::string m = error_of([] { lf::set_policy_overrides(std::string(100000, ';')); }).message();
  EXPECT_NE(
      m.find("policy overrides (100000 bytes) col 65537: a policy override spec of 100000 bytes is longer "
             "than the 65536 accepted"),
      std::string::npos)
      << m;
  // Unicode globs match unicode names byte for byte; the caret counts a code point as one column.
  const std::string u = error_of([] {
                          lf::set_policy_overrides(
                              "r\xc3\xa9"
                              "duce=fixed(block=)");
                        }).message();
  EXPECT_NE(u.find("col 21: expected a value"), std::string::npos) << u;
  EXPECT_EQ(caret_of(u).caret, 19u) << u;
  lf::set_policy_overrides(
      "r\xc3\xa9"
      "duce*=fixed(block=64)");
  EXPECT_EQ(lf::policy_override_for("void r\xc3\xa9"
                                    "duce<int>(int*)")
                ->to_string(),
            "fixed(block=64,grid=0)");
  lf::set_policy_overrides("");
}

TEST_F(PolicyOverridesEnv, FirstReadBumpsTheGeneration) {
  EXPECT_EXIT(
      {
        setenv("LAUNCHFIT_POLICY", "k=fixed", 1);
        const std::uint64_t before = lf::detail::policy_overrides_generation();
        lf::policy_override_for("k");
        const std::uint64_t after = lf::detail::policy_overrides_generation();
        lf::policy_override_for("k");
        std::exit(after == before + 1 && lf::detail::policy_overrides_generation() == after ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// lf::use("name(...)") on every launch resolves the string once: the same object comes back, nothing is
// parsed again, until a policy is registered or unregistered (which may change what the name means).
TEST(PolicyString, AStringIsResolvedOnceAndAgainAfterTheRegistryChanges) {
  const auto a = lf::policy_from_string("bytes_in_flight(per_thread=16)");
  const std::uint64_t parsed = ld::policy_string_parse_count();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(lf::policy_from_string("bytes_in_flight(per_thread=16)"), a);
  EXPECT_EQ(ld::policy_string_parse_count(), parsed);
  // Another text is its own entry.
  EXPECT_NE(lf::policy_from_string("bytes_in_flight(per_thread=8)"), a);
  EXPECT_EQ(ld::policy_string_parse_count(), parsed + 1);
  // A name registered after a string failed to resolve: the string now means the new policy.
  EXPECT_THROW(lf::policy_from_string("test_late"), lf::error);
  lf::register_policy("test_late", [](const std::map<std::string, std::string>&) {
    return std::make_shared<const lf::fixed_policy>(lf::fixed_params{128, 0});
  });
  EXPECT_EQ(lf::policy_from_string("test_late")->to_string(), "fixed(block=128,grid=0)");
  const auto first = lf::policy_from_string("test_late");
  EXPECT_EQ(lf::policy_from_string("test_late"), first);
  // (A plugin's instance is reused while held, never kept alive by the cache: its destroy() runs when its
  // users let go, fault/plugin-fault-test.cpp.)
  lf::unregister_policy("test_late");
  EXPECT_THROW(lf::policy_from_string("test_late"), lf::error)
      << "an unregistered name is not answered from memory";
  // Bounded: many distinct strings never grow the memory without end (and each still resolves).
  for (int i = 1; i <= 600; ++i)
    EXPECT_EQ(lf::policy_from_string("fixed(block=" + std::to_string(32 * (i % 32 + 1)) +
                                     ",grid=" + std::to_string(i) + ")")
                  ->to_string(),
              "fixed(block=" + std::to_string(32 * (i % 32 + 1)) + ",grid=" + std::to_string(i) + ")");
}

// A factory that makes its own policy, directly or through another, is refused with a clear error instead of
// recursing until the stack overflows; the registry stays usable.
TEST(PolicyFactory, RecursionIntoItsOwnNameIsRefused) {
  lf::register_policy("test_self_loop", [](const std::map<std::string, std::string>& params) {
    return lf::make_policy("test_self_loop", params);
  });
  lf::register_policy("test_loop_a", [](const std::map<std::string, std::string>& params) {
    return lf::make_policy("test_loop_b", params);
  });
  lf::register_policy("test_loop_b", [](const std::map<std::string, std::string>& params) {
    return lf::make_policy("test_loop_a", params);
  });
  lf::register_policy("test_delegates", [](const std::map<std::string, std::string>&) {
    return lf::make_policy("max_occupancy", {});  // another policy's factory: fine
  });
  for (const char* name : {"test_self_loop", "test_loop_a"}) {
    try {
      (void)lf::make_policy(name, {});
      ADD_FAILURE() << name << " was made";
    } catch (const lf::error& e) {
      EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_POLICY") << e.what();
      EXPECT_NE(e.message().find("makes itself again"), std::string::npos) << e.what();
    }
  }
  try {
    (void)lf::policy_from_string("test_loop_b()");
    ADD_FAILURE() << "test_loop_b was made";
  } catch (const lf::error& e) {
    EXPECT_NE(std::string(e.what()).find("'test_loop_b' -> 'test_loop_a' -> 'test_loop_b'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(lf::make_policy("test_delegates", {}), nullptr);
  EXPECT_NE(lf::make_policy("test_delegates", {}), nullptr);  // the guard was released
  for (const char* name : {"test_self_loop", "test_loop_a", "test_loop_b", "test_delegates"})
    lf::unregister_policy(name);
}

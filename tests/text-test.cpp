// SPDX-License-Identifier: MIT
// Untrusted text (lib/text.hpp): one rule set for what logs, plans, tools, plugins and the policy parser
// show or store, and the callers that rely on it.

#include "text.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "launchfit/detail/text.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "plan_json.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string marker(std::size_t full) { return "...(" + std::to_string(full) + " bytes)"; }

// What sanitize_text() stores for what escape_text() shows: each \xNN escape as one '?'.
std::string one_mark_a_byte(const std::string& escaped) {
  std::string out;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped.compare(i, 2, "\\x") == 0) {
      out += '?';
      i += 3;
    } else {
      out += escaped[i];
    }
  }
  return out;
}

// Code points of `s` when it is well-formed UTF-8 (written apart from lib/text.cpp on purpose), or
// nothing (and false) when it is not.
bool decode(const std::string& s, std::vector<std::uint32_t>& cps) {
  cps.clear();
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto t = static_cast<unsigned char>(s[i + k]);
      if ((t & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (t & 0x3f);
    }
    static constexpr std::uint32_t shortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < shortest[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    cps.push_back(cp);
    i += n;
  }
  return true;
}

bool acted_on(std::uint32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
         cp == 0x200f || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

// Valid UTF-8 holding no code point a terminal or a reader's editor would act on.
bool safe(const std::string& s) {
  std::vector<std::uint32_t> cps;
  if (!decode(s, cps)) return false;
  for (std::uint32_t cp : cps)
    if (acted_on(cp)) return false;
  return true;
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

}  // namespace

// The escapers copy runs of printable ASCII at once: the same text, cut at the same character, as escaping one
// character at a time with escape_char() (every byte, invalid UTF-8, quotes and backslashes, every limit).
static std::string escaped_per_character(std::string_view s, std::size_t max_bytes, char quote, bool keep_backslash) {
  std::string out;
  if (quote) out += quote;
  const std::size_t limit = out.size() + std::min(max_bytes, static_cast<std::size_t>(-1) - out.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t mark = out.size();
    const std::size_t n = launchfit::detail::escape_char(s, i, out, quote, keep_backslash);
    if (out.size() > limit) {
      out.resize(mark);
      break;
    }
    i += n;
  }
  if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  if (quote) out += quote;
  return out;
}

TEST(Escape, RunsOfPlainTextEscapeAsCharacterByCharacter) {
  std::mt19937_64 rng(20261205);
  const char specials[] = "\\\"'\n\t\r\x01\x1f\x7f\xc3\xa9\xe2\x80\x8b\xe2\x80\xae\xf0\x9f\x98\x80\xff\xc0 ";
  for (int t = 0; t < 100000; ++t) {
    std::string s;
    const int length = static_cast<int>(rng() % 48);
    for (int i = 0; i < length; ++i) {
      const unsigned pick = static_cast<unsigned>(rng() % 4);
      s += pick == 0 ? specials[rng() % (sizeof specials - 1)]
                     : pick == 1 ? static_cast<char>(rng() % 256) : static_cast<char>(' ' + rng() % 95);
    }
    const std::size_t limit = t % 7 == 0 ? static_cast<std::size_t>(-1) : rng() % 60;
    ASSERT_EQ(launchfit::detail::escape_text(s, limit), escaped_per_character(s, limit, '\0', false)) << t;
    ASSERT_EQ(launchfit::detail::quote_text(s, limit, '"'), escaped_per_character(s, limit, '"', false)) << t;
    ASSERT_EQ(launchfit::detail::quote_text(s, limit, '\''), escaped_per_character(s, limit, '\'', false)) << t;
    ASSERT_EQ(launchfit::detail::escape_line(s, limit), escaped_per_character(s, limit, '\0', true)) << t;
  }
}

TEST(Text, ValidUtf8AndPlainTextAreKept) {
  const std::string text = "plain 32 KB/SM, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x9a\x80, 'q'";
  EXPECT_EQ(ld::escape_text(text), text);
  EXPECT_EQ(ld::quote_text(text), "\"" + text + "\"");
  EXPECT_EQ(ld::escape_text(""), "");
  EXPECT_EQ(ld::quote_text(""), "\"\"");
  EXPECT_EQ(ld::escape_text(utf8(0x10ffff)), utf8(0x10ffff));  // the last code point
  EXPECT_EQ(ld::escape_text(utf8(0xa0)), utf8(0xa0));          // first after C1
}

TEST(Text, EachByteOfInvalidUtf8IsEscaped) {
  struct bad {
    std::string in, out;
  };
  for (const bad& b : {
           bad{"\x80", "\\x80"},                                    // a lone continuation byte
           bad{"\xc0\xaf", "\\xc0\\xaf"},                           // overlong '/'
           bad{"\xc1\xbf", "\\xc1\\xbf"},                           // overlong, 2 bytes
           bad{"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},                  // overlong, 3 bytes
           bad{"\xf0\x80\x80\xaf", "\\xf0\\x80\\x80\\xaf"},         // overlong, 4 bytes
           bad{"\xed\xa0\x80", "\\xed\\xa0\\x80"},                  // a UTF-16 surrogate
           bad{"\xed\xbf\xbf", "\\xed\\xbf\\xbf"},                  // the last surrogate
           bad{"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},         // U+110000
           bad{"\xf5\x80\x80\x80", "\\xf5\\x80\\x80\\x80"},         // no code point starts with F5
           bad{"\xff\xfe", "\\xff\\xfe"},                           //
           bad{"end \xe2\x82", "end \\xe2\\x82"},                   // truncated by the end
           bad{"\xe2\x82z", "\\xe2\\x82z"},                         // truncated by an ASCII byte
           bad{"\xf0\x9f\x9a\xc3\xa9", "\\xf0\\x9f\\x9a\xc3\xa9"},  // truncated by a valid character
       }) {
    SCOPED_TRACE(b.out);
    EXPECT_EQ(ld::escape_text(b.in), b.out);
    EXPECT_EQ(ld::quote_text(b.in), "\"" + b.out + "\"");
    EXPECT_EQ(ld::sanitize_text(b.in, 64), one_mark_a_byte(b.out));
    EXPECT_FALSE(ld::is_clean_text(b.in, 64));
  }
  EXPECT_EQ(ld::sanitize_text("\xed\xa0\x80 \xe2\x82", 64), "??? ??");  // one '?' a byte
}

TEST(Text, ControlsSeparatorsBidiAndBomAreEscaped) {
  EXPECT_EQ(ld::escape_text("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(ld::escape_text(std::string("\0\x01\x1b[2J\x1f\x7f", 8)), "\\x00\\x01\\x1b[2J\\x1f\\x7f");
  EXPECT_EQ(ld::escape_text("back\\slash"), "back\\\\slash");
  EXPECT_EQ(ld::escape_text("\xc2\x80\xc2\x85\xc2\x9b\xc2\x9f"), "\\u0080\\u0085\\u009b\\u009f");  // C1
  EXPECT_EQ(ld::escape_text("\xe2\x80\xa8\xe2\x80\xa9"), "\\u2028\\u2029");  // line, paragraph separator
  for (std::uint32_t cp : {0x200eu, 0x200fu, 0x202au, 0x202bu, 0x202cu, 0x202du, 0x202eu, 0x2066u, 0x2067u,
                           0x2068u, 0x2069u, 0x061cu, 0xfeffu}) {
    char want[8];
    std::snprintf(want, sizeof want, "\\u%04x", cp);
    EXPECT_EQ(ld::escape_text("x" + utf8(cp) + "y"), std::string("x") + want + "y");
    EXPECT_EQ(ld::sanitize_text("x" + utf8(cp) + "y", 64), "x?y");
    EXPECT_FALSE(ld::is_clean_text(utf8(cp), 64));
  }
  // Their neighbours are ordinary characters.
  for (std::uint32_t cp : {0x200du, 0x2010u, 0x2027u, 0x202fu, 0x2065u, 0x206au, 0xfefeu, 0xff00u})
    EXPECT_EQ(ld::escape_text(utf8(cp)), utf8(cp)) << std::hex << cp;
}

TEST(Text, TheQuotedFormEscapesItsQuote) {
  EXPECT_EQ(ld::escape_text("say \"hi\""), "say \"hi\"");
  EXPECT_EQ(ld::quote_text("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(ld::quote_text("a\\\"b"), "\"a\\\\\\\"b\"");  // a\"b: the backslash and the quote, each
  EXPECT_EQ(ld::quote_text("it's \"x\"", 256, '\''), "'it\\'s \"x\"'");
  EXPECT_EQ(ld::quote_text("x", 256, '\xe2'), "\"x\"");  // no quote that could be half a character
}

TEST(Text, TruncationNeverSplitsACharacterOrAnEscapeAndSaysTheFullSize) {
  const std::string e_acute = "\xc3\xa9";
  std::string four;
  for (int i = 0; i < 10; ++i) four += e_acute;  // 20 bytes
  EXPECT_EQ(ld::escape_text(four, 5), e_acute + e_acute + marker(20));
  EXPECT_EQ(ld::escape_text(four, 20), four);  // exactly fits: no marker
  EXPECT_EQ(ld::escape_text(four, 19), e_acute + e_acute + e_acute + e_acute + e_acute + e_acute + e_acute +
                                           e_acute + e_acute + marker(20));
  EXPECT_EQ(ld::escape_text("\x1b\x1b\x1b", 7), "\\x1b" + marker(3));  // not "\x1b\x1"
  EXPECT_EQ(ld::escape_text("a\xe2\x80\xae", 6), "a" + marker(4));     // not "a\u20"
  EXPECT_EQ(ld::escape_text("ab\\", 3), "ab" + marker(3));             // not "ab\"
  EXPECT_EQ(ld::quote_text("ab\"", 3), "\"ab" + marker(3) + "\"");     // the closing quote stays
  EXPECT_EQ(ld::escape_text("\xf0\x9f\x9a\x80", 3), marker(4));        // nothing fits
  EXPECT_EQ(ld::escape_text(std::string(1 << 20, 'x'), 16), std::string(16, 'x') + marker(1 << 20));
  EXPECT_EQ(ld::sanitize_text(four, 5), e_acute + e_acute);  // stored values carry no marker
  EXPECT_EQ(ld::sanitize_text(std::string(10000, 'x'), 4096).size(), 4096u);
}

TEST(Text, OutputIsBoundedExactly) {
  const std::vector<std::string> inputs = {
      std::string(300, 'a'),
      std::string(300, '\x1b'),
      "\xe2\x80\xae\xe2\x80\xae\xe2\x80\xae\xe2\x80\xae\xe2\x80\xae\xe2\x80\xae",
      "\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80",
      "mix\xff\"\\\n\xc3\xa9\xe2\x80\xa8 tail of text",
  };
  for (const std::string& s : inputs) {
    const std::string whole = ld::escape_text(s, SIZE_MAX);
    for (std::size_t max = 0; max <= whole.size() + 2; ++max) {
      SCOPED_TRACE(whole + " max " + std::to_string(max));
      const std::string e = ld::escape_text(s, max);
      if (whole.size() <= max) {
        EXPECT_EQ(e, whole);
        continue;
      }
      const std::string m = marker(s.size());
      ASSERT_GE(e.size(), m.size());
      ASSERT_EQ(e.substr(e.size() - m.size()), m);
      const std::string kept = e.substr(0, e.size() - m.size());
      EXPECT_LE(kept.size(), max);
      EXPECT_EQ(whole.compare(0, kept.size(), kept), 0);  // a prefix of the whole, cut between pieces
      EXPECT_TRUE(safe(kept));
      const std::string q = ld::quote_text(s, max);
      EXPECT_LE(q.size(), max + m.size() + 2);
      EXPECT_LE(ld::sanitize_text(s, max).size(), max);
    }
  }
}

TEST(Text, SanitizeAndIsCleanAgree) {
  EXPECT_EQ(ld::sanitize_text("plain text, 32 KB/SM", 64), "plain text, 32 KB/SM");
  EXPECT_EQ(ld::sanitize_text("a\nb\r\tc\x1b[31m", 64), "a?b??c?[31m");
  EXPECT_EQ(ld::sanitize_text("caf\xc3\xa9 \xe2\x80\xae rtl \xc2\x85 nel", 64), "caf\xc3\xa9 ? rtl ? nel");
  EXPECT_EQ(ld::sanitize_text("back\\slash \"q\"", 64), "back\\slash \"q\"");  // nothing unsafe there
  EXPECT_TRUE(ld::is_clean_text("NVIDIA H200 caf\xc3\xa9", 64));
  EXPECT_TRUE(ld::is_clean_text("", 0));
  EXPECT_FALSE(ld::is_clean_text("abc", 2));  // too long is refused, not cut
  EXPECT_FALSE(ld::is_clean_text("a\tb", 64));
  const std::string once = ld::sanitize_text("x\n\xff\xe2\x80\xa8y", 64);
  EXPECT_EQ(once, "x???y");
  EXPECT_EQ(ld::sanitize_text(once, 64), once);
  EXPECT_TRUE(ld::is_clean_text(once, 64));
}

TEST(Text, AnAssembledLineKeepsItsEscapes) {
  const std::string piece =
      "kernel=" + ld::escape_text("k\xe2\x80\xae\\") + " reason=" + ld::quote_text("a\"b");
  EXPECT_EQ(ld::escape_line(piece, 4096), piece);  // escaping twice would double every backslash
  EXPECT_EQ(ld::escape_line("raw\nline\x1b", 4096), "raw\\nline\\x1b");
  EXPECT_EQ(ld::valid_utf8("ok \xff\xc3\xa9\x1b", 64),
            "ok \xef\xbf\xbd\xc3\xa9\x1b");  // JSON escapes the rest
  EXPECT_EQ(ld::valid_utf8(std::string(100, 'v'), 10), std::string(10, 'v') + marker(100));
}

TEST(Text, RandomBytesComeOutSafeAndBounded) {
  std::mt19937 rng(20261203);
  // Bytes near the edges of the rules, more often than uniform bytes would give them.
  static constexpr char edge_bytes[] =
      "\x00\x1b\x7f\\\"'\x80\x85\x9b\xbf\xc0\xc1\xc2\xdf\xe0\xe2\xed\xef\xf0\xf4\xf5\xff";
  const std::string edges(edge_bytes, sizeof edge_bytes - 1);
  const std::vector<std::string> pieces = {"\xe2\x80\xae", "\xe2\x80\xa8", "\xef\xbb\xbf",    "\xc2\x85",
                                           "\xd8\x9c",     "\xc3\xa9",     "\xf0\x9f\x9a\x80"};
  for (int round = 0; round < 3000; ++round) {
    std::string s;
    const std::size_t len = rng() % 96;
    while (s.size() < len) {
      const unsigned pick = rng() % 8;
      if (pick < 3) {
        s += static_cast<char>(rng() & 0xff);
      } else if (pick < 6) {
        s += edges[rng() % edges.size()];
      } else {
        s += pieces[rng() % pieces.size()];
      }
    }
    const std::size_t max = rng() % 128;
    SCOPED_TRACE(testing::PrintToString(s) + " max " + std::to_string(max));
    const std::string m = marker(s.size());
    for (const std::string& e : {ld::escape_text(s, max), ld::quote_text(s, max).substr(1)}) {
      ASSERT_TRUE(safe(e)) << testing::PrintToString(e);
      ASSERT_LE(e.size(), max + m.size() + 1);
    }
    // In the quoted form every '"' but the last is escaped: preceded by an odd run of backslashes.
    const std::string q = ld::quote_text(s, max);
    for (std::size_t i = 1; i + 1 < q.size(); ++i) {
      if (q[i] != '"') continue;
      std::size_t run = 0;
      while (run < i && q[i - 1 - run] == '\\') ++run;
      ASSERT_EQ(run % 2, 1u) << testing::PrintToString(q);
    }
    const std::string clean = ld::sanitize_text(s, max);
    ASSERT_TRUE(safe(clean));
    ASSERT_LE(clean.size(), max);
    ASSERT_TRUE(ld::is_clean_text(clean, max));
    ASSERT_EQ(ld::sanitize_text(clean, max), clean);
    ASSERT_EQ(ld::is_clean_text(s, max), ld::sanitize_text(s, SIZE_MAX) == s && s.size() <= max);
  }
}

// ---- the callers ----

TEST(TextCallers, ALogLineShowsAKernelNameAsThePlanFileToolShowsAPath) {
  const std::string hostile = "\xe2\x80\xae\x1b[2J";  // U+202E, then a clear-screen sequence
  const std::string shown = "\\u202e\\x1b[2J";
  EXPECT_EQ(ld::escape_text(hostile), shown);

  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel = lf::kernel_resources::manual(32, 0, 1024, "_Z1kv" + hostile);
  q.kernel.demangled = "k()" + hostile;
  ld::kept_plan kept;  // format_plan() reads it synchronously: a local one serves
  kept.plan = lf::bytes_in_flight_policy{{32, 0}}.choose(q);
  kept.kernel_name = q.kernel.name;
  kept.kernel_demangled = q.kernel.demangled;
  kept.regs_per_thread = q.kernel.regs_per_thread;
  lf::device_limits device = q.device;
  device.name = "NVIDIA H200";
  ld::plan_report r;
  r.kept = &kept;
  r.device = &device;
  r.first_work = {lf::work::shape::grid_stride, 1 << 20, 1};
  const std::string line = ld::format_plan(r, lf::log_format::text);
  EXPECT_TRUE(has(line, "kernel=k()" + shown + " ")) << line;

  const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";
  if (!std::ifstream(tool).good()) GTEST_SKIP() << tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  const std::string missing = fs::temp_directory_path().string() + "/launchfit-text-test-" +
                              std::to_string(::getpid()) + "-plans" + hostile + ".json";
  const std::string out =
      fs::temp_directory_path().string() + "/launchfit-text-test-" + std::to_string(::getpid()) + ".out";
  const int status = std::system(("'" + tool + "' show '" + missing + "' >'" + out + "' 2>&1").c_str());
  std::stringstream text;
  text << std::ifstream(out, std::ios::binary).rdbuf();
  fs::remove(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << text.str();  // no such file: the environment
  EXPECT_TRUE(has(text.str(), "-plans" + shown + ".json: no such file")) << text.str();
  EXPECT_FALSE(has(text.str(), hostile)) << text.str();
}

TEST(TextCallers, APolicyParameterIsQuotedByTheRuleSet) {
  try {
    lf::make_policy("fixed", {{"block", "1\xe2\x80\xae\x1b'"}});
    FAIL() << "accepted";
  } catch (const lf::error& e) {
    EXPECT_TRUE(has(e.message(), "parameter 'block': expected an integer, got '1\\u202e\\x1b\\''"))
        << e.message();
    EXPECT_TRUE(safe(e.message())) << e.message();
  }
}

TEST(TextCallers, AnUnknownPolicyNameIsQuotedByTheRuleSet) {
  try {
    lf::make_policy("no\xe2\x80\xa8such'", {});
    FAIL() << "accepted";
  } catch (const lf::error& e) {
    EXPECT_TRUE(has(e.message(), "unknown policy 'no\\u2028such\\''")) << e.message();
  }
}

TEST(TextCallers, PlanTextReadFromAFileIsSanitized) {
  nlohmann::json j = ld::plan_to_json(lf::plan{});
  j["block"] = {128, 1, 1};
  j["block_threads"] = 128;  // a plan whose threads disagree with its block is refused when read
  j["reason"] = "read\xe2\x80\xae\nback";
  j["warning"] = std::string(10000, 'w');
  const lf::plan p = ld::plan_from_json(j);
  EXPECT_EQ(p.reason, "read??back");
  EXPECT_EQ(p.warning.size(), ld::max_plan_text_bytes);
}

// SPDX-License-Identifier: MIT
// policy_from_string(): the policy-string parser, its syntax errors and the cache of resolved strings.
// Per-kernel overrides (LAUNCHFIT_POLICY) are policy_overrides.cpp's.

#include "policy_string.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_set>
#include <utility>

#include "launchfit/detail/policy_params.hpp"
#include "launchfit/error.hpp"
#include "plan_cache.hpp"
#include "lifecycle.hpp"
#include "plan_inputs.hpp"
#include "settings.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

}  // namespace

// "'x'", or "end of string" — what the parser found where it expected something else.
std::string found(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return "end of string";
  const char c = text[pos];
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  std::string out;
  append_hex(out, "byte 0x", static_cast<unsigned char>(c), 2);
  return out;
}

std::string_view trim(std::string_view s, std::size_t* offset) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  if (offset) *offset += b;
  return s.substr(b, e - b);
}

namespace {

class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  parsed_policy parse() {
    parsed_policy out;
    skip_space();
    if (!is_name_start(peek())) fail("expected a policy name, got " + found(text_, pos_));
    out.name_pos = pos_;
    out.name = name();
    // As written in C++: launchfit::max_occupancy(0), lf::fixed(256).
    if ((out.name == "launchfit" || out.name == "lf") && text_.substr(pos_, 2) == "::") {
      pos_ += 2;
      if (!is_name_start(peek())) fail("expected a policy name after '::', got " + found(text_, pos_));
      out.name_pos = pos_;
      out.name = name();
    }
    skip_space();
    if (at_end()) return out;
    if (peek() != '(') fail("expected '(' or the end, got " + found(text_, pos_));
    ++pos_;
    skip_space();
    if (peek() == ')') {
      ++pos_;
    } else {
      std::unordered_set<std::string_view> keys;  // views into text_: one hash per key, not a scan
      int groups = 0;                             // brace groups so far
      for (;;) {
        const bool positional = peek() == '{' || is_number_start(peek());
        if (!positional && !is_name_start(peek()))
          fail("expected a parameter name or ')', got " + found(text_, pos_));
        if (!out.params.empty() && positional != out.params.front().key.empty()) {
          fail(positional
                   ? "a value in the factory's order after name=value parameters: give every parameter "
                     "by name, or every one in order as in C++"
                   : "a name=value parameter after values in the factory's order: give every parameter "
                     "by name, or every one in order as in C++");
        }
        if (peek() == '{') {
          brace_group(out, groups++);
        } else if (positional) {
          policy_param p;
          p.key_pos = p.value_pos = pos_;
          p.value = number();
          out.params.push_back(std::move(p));
        } else {
          policy_param p;
          p.key_pos = pos_;
          p.key = name();
          if (!keys.insert(text_.substr(p.key_pos, p.key.size())).second) {
            fail("parameter " + quote_text(p.key, 64, '\'') + " given twice", p.key_pos);
          }
          skip_space();
          if (peek() != '=')
            fail("expected '=' after " + quote_text(p.key, 64, '\'') + ", got " + found(text_, pos_));
          ++pos_;
          skip_space();
          p.value_pos = pos_;
          p.value = value();
          out.params.push_back(std::move(p));
        }
        skip_space();
        if (peek() == ',') {
          ++pos_;
          skip_space();
          continue;
        }
        if (peek() == ')') {
          ++pos_;
          break;
        }
        fail("expected ',' or ')', got " + found(text_, pos_));
      }
    }
    skip_space();
    if (!at_end()) fail("unexpected " + found(text_, pos_) + " after ')'");
    return out;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() {
    while (!at_end() && is_space(text_[pos_])) ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const { throw syntax_error(pos_, what); }
  [[noreturn]] void fail(const std::string& what, std::size_t at) const { throw syntax_error(at, what); }

  std::string name() {
    const std::size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  static bool is_number_start(char c) { return is_digit(c) || c == '+' || c == '-' || c == '.'; }

  // {x}, {x, y} or {x, y, z}: dims as written in C++ (fixed({16, 16})), one positional parameter per
  // component.
  void brace_group(parsed_policy& out, int group) {
    const std::size_t open = pos_;
    ++pos_;
    skip_space();
    int components = 0;
    for (;;) {
      if (!is_number_start(peek())) fail("expected a number in {x, y, z}, got " + found(text_, pos_));
      if (components == 3) fail("dims have at most 3 components (x, y, z)");
      policy_param p;
      p.key_pos = open;  // an error about the dims points at their '{', one about a value at the value
      p.value_pos = pos_;
      p.value = number();
      p.braces = group;
      out.params.push_back(std::move(p));
      ++components;
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return;
      }
      fail(at_end() ? "expected ',' or '}' to close the '{' at col " + std::to_string(open + 1)
                    : "expected ',' or '}', got " + found(text_, pos_));
    }
  }

  std::string value() {
    const char c = peek();
    if (is_name_start(c)) return name();
    if (is_digit(c) || c == '+' || c == '-' || c == '.') return number();
    fail(at_end() || c == ',' || c == ')' ? std::string("expected a value")
                                          : "expected a value, got " + found(text_, pos_));
  }

  std::string number() {
    const std::size_t start = pos_;
    if (peek() == '+' || peek() == '-') ++pos_;
    if (pos_ > start && is_name_start(peek())) {  // "-inf": how a float parameter prints itself
      const std::string word = name();
      if (word == "inf" || word == "nan") return std::string(text_.substr(start, pos_ - start));
      fail("expected a digit, got " + found(text_, start + 1), start + 1);
    }
    const std::size_t digits_start = pos_;
    while (is_digit(peek())) ++pos_;
    const std::size_t int_digits = pos_ - digits_start;
    bool integer = true;
    if (peek() == '.') {
      integer = false;
      ++pos_;
      const std::size_t frac_start = pos_;
      while (is_digit(peek())) ++pos_;
      if (int_digits == 0 && pos_ == frac_start) fail("expected a number", start);
    } else if (int_digits == 0) {
      fail("expected a digit, got " + found(text_, pos_));
    }
    if (peek() == 'e' || peek() == 'E') {
      integer = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail("expected the exponent's digits, got " + found(text_, pos_));
      while (is_digit(peek())) ++pos_;
    }
    std::string literal(text_.substr(start, pos_ - start));
    if (!is_name_char(peek())) return literal;

    const std::size_t suffix_pos = pos_;
    const std::string suffix = name();
    int shift = 0;
    if (suffix == "K" || suffix == "KB") shift = 10;
    if (suffix == "M" || suffix == "MB") shift = 20;
    if (shift == 0 || !integer) {
      fail("unexpected " + found(text_, suffix_pos) + " in a number (size suffixes: K, KB, M, MB)",
           suffix_pos);
    }
    const bool negative = text_[start] == '-';
    std::uint64_t v = 0;
    for (std::size_t i = digits_start; i < suffix_pos; ++i) {
      const auto d = static_cast<std::uint64_t>(text_[i] - '0');
      if (v > (UINT64_MAX - d) / 10) fail("number too large", start);
      v = v * 10 + d;
    }
    if (v > (UINT64_MAX >> shift)) fail("number too large", start);
    return (negative ? "-" : "") + std::to_string(v << shift);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

parsed_policy parse_policy_string(std::string_view text) { return parser(text).parse(); }

namespace {

// A policy's parameter names in order: the keys of params() ("k=v,k=v") of the policy made without any.
std::vector<std::string> parameter_names(const std::string& policy_name) {
  const std::string listed = make_policy(policy_name, {})->params();
  std::vector<std::string> names;
  for (std::size_t begin = 0; begin < listed.size();) {
    std::size_t end = listed.find(',', begin);
    if (end == std::string::npos) end = listed.size();
    const std::string item = listed.substr(begin, end - begin);
    names.push_back(item.substr(0, item.find('=')));
    begin = end + 1;
  }
  return names;
}

// Arguments in the factory's order (fixed(256, 80), fixed({16, 16}), max_occupancy(0)) given their names.
parsed_policy name_arguments(parsed_policy parsed) {
  if (parsed.params.empty() || !parsed.params.front().key.empty()) return parsed;
  // The C++ overload fixed(dims block, dims grid = {0}) makes fixed_dims.
  if (parsed.name == "fixed" && parsed.params.front().braces >= 0) parsed.name = "fixed_dims";
  std::vector<std::string> names;
  try {
    names = parameter_names(parsed.name);
  } catch (const error& e) {
    throw syntax_error(parsed.name_pos, e.message());
  }
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  std::size_t next = 0;
  for (std::size_t i = 0; i < parsed.params.size();) {
    policy_param& first = parsed.params[i];
    if (first.braces < 0) {
      if (next >= names.size()) {
        throw syntax_error(first.value_pos, "policy " + quote_text(parsed.name, 64, '\'') +
                                                " takes at most " + std::to_string(names.size()) +
                                                " arguments (" +
                                                (known.empty() ? std::string("none") : known) + ")");
      }
      first.key = names[next++];
      ++i;
      continue;
    }
    // {x, y, z}: three parameters named for the same dims, <p>x, <p>y and <p>z.
    const auto dims_at = [&](std::size_t at) {
      if (at + 3 > names.size()) return false;
      const std::string& x = names[at];
      if (x.empty() || x.back() != 'x') return false;
      const std::string prefix = x.substr(0, x.size() - 1);
      return names[at + 1] == prefix + "y" && names[at + 2] == prefix + "z";
    };
    if (!dims_at(next)) {
      throw syntax_error(first.key_pos,
                         "policy " + quote_text(parsed.name, 64, '\'') +
                             " has no dims {x, y, z} at argument " + std::to_string(next + 1) +
                             " (its parameters: " + (known.empty() ? std::string("none") : known) + ")");
    }
    const int group = first.braces;
    const std::size_t at = first.key_pos;
    int component = 0;
    for (; i < parsed.params.size() && parsed.params[i].braces == group; ++i)
      parsed.params[i].key = names[next + static_cast<std::size_t>(component++)];
    for (; component < 3; ++component) {  // {16, 16} is {16, 16, 1}, as dims are in C++
      policy_param one;
      one.key = names[next + static_cast<std::size_t>(component)];
      one.value = "1";
      one.key_pos = one.value_pos = at;
      one.braces = group;
      parsed.params.insert(parsed.params.begin() + static_cast<std::ptrdiff_t>(i++), std::move(one));
    }
    next += 3;
  }
  return parsed;
}

}  // namespace

std::shared_ptr<const policy> make_parsed_policy(const parsed_policy& given) {
  const parsed_policy parsed = name_arguments(given);
  std::map<std::string, std::string> params;
  for (const auto& p : parsed.params) params.emplace(p.key, p.value);
  try {
    return make_policy(parsed.name, params);
  } catch (const parameter_error& e) {
    std::size_t at = parsed.name_pos;  // a key the text does not hold (a factory's own): the policy
    for (const auto& p : parsed.params) {
      if (p.key == e.key()) at = e.at() == bad_parameter::part::key ? p.key_pos : p.value_pos;
    }
    throw syntax_error(at, e.message());
  } catch (const error& e) {
    throw syntax_error(parsed.name_pos, e.message());
  }
}

namespace {

// One character of echoed text as shown in a message (escape_char()), with the columns it takes: an
// escape is ASCII, one column a byte; a character kept as it is takes one.
struct shown_char {
  std::string text;
  std::size_t bytes = 1;
  std::size_t width = 1;
};

shown_char show_char(std::string_view s, std::size_t i) {
  shown_char c;
  c.bytes = escape_char(s, i, c.text);
  c.width = c.text == s.substr(i, c.bytes) ? 1 : c.text.size();
  return c;
}

constexpr std::size_t window_bytes = 80;  // of the source echoed around the column
constexpr std::size_t what_bytes = 1024;  // of an explanation (it may quote a long name)

struct echo {
  std::string line;   // the window, escaped, with "..." where it was cut
  std::size_t caret;  // columns before the caret in `line`
  bool whole;         // the window is the whole source
};

echo echo_around(std::string_view source, std::size_t pos) {
  std::size_t begin = 0, end = source.size();
  if (source.size() > window_bytes) {
    begin = pos > window_bytes / 2 ? pos - window_bytes / 2 : 0;
    end = std::min(source.size(), begin + window_bytes);
    begin = end - std::min(end, window_bytes);
    // Never start or end inside a UTF-8 sequence.
    while (begin > 0 && begin < pos && (static_cast<unsigned char>(source[begin]) & 0xc0) == 0x80) ++begin;
    while (end < source.size() && end > pos && (static_cast<unsigned char>(source[end]) & 0xc0) == 0x80)
      --end;
  }
  echo out{begin > 0 ? "..." : "", begin > 0 ? 3u : 0u, begin == 0 && end == source.size()};
  for (std::size_t i = begin; i < end;) {
    const shown_char c = show_char(source.substr(0, end), i);
    if (i + c.bytes <= pos) out.caret += c.width;  // a sequence holding pos gets the caret at its start
    out.line += c.text;
    i += c.bytes;
  }
  if (end < source.size()) out.line += "...";
  return out;
}

// An explanation as shown: escaped like the source but for '\', which is kept so that the escapes it holds
// already (a parameter quoted by quote_text()) read as they are; cut when a quoted name made it long.
std::string shown_what(std::string_view what) {
  std::string out;
  std::size_t i = 0;
  while (i < what.size()) {
    const std::size_t mark = out.size();
    std::size_t n = 1;
    if (what[i] == '\\') {
      out += '\\';
    } else {
      n = escape_char(what, i, out);
    }
    if (out.size() > what_bytes) {
      out.resize(mark);
      break;
    }
    i += n;
  }
  if (i < what.size()) out += "...(" + std::to_string(what.size()) + " bytes)";
  return out;
}

}  // namespace

std::string syntax_error_text(std::string_view label, std::string_view source, const syntax_error& e) {
  const std::size_t pos = std::min(e.pos, source.size());
  const echo shown = echo_around(source, pos);
  // A short source is quoted in full on the first line; a long one only by its size.
  return std::string(label) +
         (shown.whole ? " \"" + shown.line + "\"" : " (" + std::to_string(source.size()) + " bytes)") + " col " +
         std::to_string(pos + 1) + ": " + shown_what(e.what()) + "\n  " + shown.line + "\n  " +
         std::string(shown.caret, ' ') + '^';
}

void throw_syntax_error(std::string_view call, std::string_view label, std::string_view source,
                        const syntax_error& e) {
  throw error(errc::bad_policy_string, std::string(call), syntax_error_text(label, source, e));
}

void check_length(std::string_view text, std::string_view what) {
  if (text.size() > max_policy_text_bytes) {
    throw syntax_error(max_policy_text_bytes, std::string(what) + " of " + std::to_string(text.size()) +
                                                  " bytes is longer than the " +
                                                  std::to_string(max_policy_text_bytes) + " accepted");
  }
}

}  // namespace detail

namespace {

// Policies by their string, resolved once: lf::use("bytes_in_flight(per_thread=16)") on every launch parses
// and builds nothing after the first. Valid for one generation of the plan inputs (a policy registered or
// unregistered under a name changes what a string means) and bounded (cleared when full: a program that
// builds unbounded distinct strings pays the parse, never the memory). A built-in policy is kept; any other
// (a plugin's instance, whose destroy() its plugin sees, a user factory's object) is reused while someone
// holds it and never kept alive by the cache, so its lifetime stays its users'.
struct resolved_policies {
  struct entry {
    std::shared_ptr<const policy> kept;  // built-ins
    std::weak_ptr<const policy> held;    // the others, while alive
  };
  std::shared_mutex mutex;
  std::uint64_t generation = 0;
  std::map<std::string, entry, std::less<>> by_text;
  static constexpr std::size_t max_entries = 256;
};

// A leaf: under it the map is read or changed, and nothing else is locked (what the map drops there are
// built-ins, whose destructors run no code of others, or weak references).
std::shared_mutex& resolved_mutex();
resolved_policies& resolved() {
  static resolved_policies& r = *[] {
    auto* made = new resolved_policies;  // never destroyed: static destructors may launch
    detail::lifecycle::on_fork_leaf_mutex<resolved_mutex>();
    return made;
  }();
  return r;
}
std::shared_mutex& resolved_mutex() { return resolved().mutex; }

// Made at load time, before any thread: a fork never meets its initialiser (and hook registration) in progress.
const bool resolved_made = (resolved(), true);

std::atomic<std::uint64_t> policy_string_parses{0};

}  // namespace

namespace detail {
std::uint64_t policy_string_parse_count() noexcept {
  return policy_string_parses.load(std::memory_order_relaxed);
}
}  // namespace detail

std::shared_ptr<const policy> policy_from_string(std::string_view text) {
  resolved_policies& r = resolved();
  const std::uint64_t generation = detail::plan_inputs_generation();
  {
    std::shared_lock<std::shared_mutex> lock(r.mutex);
    if (r.generation == generation) {
      if (const auto it = r.by_text.find(text); it != r.by_text.end()) {
        if (it->second.kept) return it->second.kept;
        if (auto alive = it->second.held.lock()) return alive;
      }
    }
  }
  std::shared_ptr<const policy> made;
  try {
    detail::check_length(text, "a policy string");
    policy_string_parses.fetch_add(1, std::memory_order_relaxed);
    made =
        detail::make_parsed_policy(detail::parse_policy_string(text));  // no lock held: a factory may parse
  } catch (const detail::syntax_error& e) {
    detail::throw_syntax_error("policy_from_string", "policy string", text, e);
  }
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  // Kept only if no input changed while it was made (the registry is read under that generation).
  if (generation == detail::plan_inputs_generation()) {
    if (r.generation != generation || r.by_text.size() >= resolved_policies::max_entries) {
      r.by_text.clear();
      r.generation = generation;
    }
    auto& e = r.by_text[std::string(text)];
    e = made->builtin() ? resolved_policies::entry{made, {}} : resolved_policies::entry{{}, made};
  }
  return made;
}

}  // namespace launchfit

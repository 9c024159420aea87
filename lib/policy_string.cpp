// SPDX-License-Identifier: MIT
// policy_from_string() and per-kernel overrides (LAUNCHFIT_POLICY).

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
#include "plan_inputs.hpp"
#include "text.hpp"

namespace launchfit {
namespace detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// "'x'", or "end of string" — what the parser found where it expected something else.
std::string found(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return "end of string";
  const char c = text[pos];
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  static constexpr char hex[] = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(c);
  return std::string("byte 0x") + hex[byte >> 4] + hex[byte & 15];
}

class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  parsed_policy parse() {
    parsed_policy out;
    skip_space();
    if (!is_name_start(peek())) fail("expected a policy name, got " + found(text_, pos_));
    out.name_pos = pos_;
    out.name = name();
    skip_space();
    if (at_end()) return out;
    if (peek() != '(') fail("expected '(' or the end, got " + found(text_, pos_));
    ++pos_;
    skip_space();
    if (peek() == ')') {
      ++pos_;
    } else {
      std::unordered_set<std::string_view> keys;  // views into text_: one hash per key, not a scan
      for (;;) {
        if (!is_name_start(peek())) fail("expected a parameter name or ')', got " + found(text_, pos_));
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

std::string_view trim(std::string_view s, std::size_t* offset = nullptr) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  if (offset) *offset += b;
  return s.substr(b, e - b);
}

}  // namespace

parsed_policy parse_policy_string(std::string_view text) { return parser(text).parse(); }

std::shared_ptr<const policy> make_parsed_policy(const parsed_policy& parsed) {
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

void throw_syntax_error(std::string_view call, std::string_view label, std::string_view source,
                        const syntax_error& e) {
  const std::size_t pos = std::min(e.pos, source.size());
  const echo shown = echo_around(source, pos);
  // A short source is quoted in full on the first line; a long one only by its size.
  std::string message =
      std::string(label) +
      (shown.whole ? " \"" + shown.line + "\"" : " (" + std::to_string(source.size()) + " bytes)") + " col " +
      std::to_string(pos + 1) + ": " + shown_what(e.what()) + "\n  " + shown.line + "\n  " +
      std::string(shown.caret, ' ') + '^';
  throw error(errc::bad_policy_string, std::string(call), std::move(message));
}

void check_length(std::string_view text, std::string_view what) {
  if (text.size() > max_policy_text_bytes) {
    throw syntax_error(max_policy_text_bytes, std::string(what) + " of " + std::to_string(text.size()) +
                                                  " bytes is longer than the " +
                                                  std::to_string(max_policy_text_bytes) + " accepted");
  }
}

bool glob_match(std::string_view pattern, std::string_view text) noexcept {
  // Iterative, backtracking only to the last '*': O(|pattern| x |text|) at worst.
  std::size_t p = 0, t = 0, star = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {  // before the literal test: '*' also matches a '*'
      star = p++;
      star_t = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

kernel_match_names match_names(std::string_view demangled) {
  std::string_view s = trim(demangled);
  if (!s.empty() && s.back() == ')') {  // the parameter list: back to its matching '('
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s = trim(s.substr(0, i));
        break;
      }
    }
  }
  // The return type ends at the last space outside <...> and (...): "void ns::k<float, 4>".
  int depth = 0;
  std::size_t name_start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    if ((s[i] == '>' || s[i] == ')') && depth > 0) --depth;
    if (s[i] == ' ' && depth == 0) name_start = i + 1;
  }
  kernel_match_names names;
  names.with_template_args = std::string(s.substr(name_start));
  depth = 0;
  for (char c : names.with_template_args) {
    if (c == '<')
      ++depth;
    else if (c == '>' && depth > 0)
      --depth;
    else if (depth == 0)
      names.without_template_args += c;
  }
  return names;
}

std::optional<syntax_error> glob_refusal(std::string_view glob) {
  for (std::size_t i = 0; i < glob.size(); ++i) {
    const auto c = static_cast<unsigned char>(glob[i]);
    if (c < 0x20 || c == 0x7f) {
      return syntax_error(i, "the glob cannot match: a kernel name never holds " + found(glob, i));
    }
  }
  // Up to the first wildcard the glob is the start of the name itself, so its nesting is known: a space
  // outside <...> and (...) there would end a return type, which match names never keep.
  int depth = 0;
  for (std::size_t i = 0; i < glob.size() && glob[i] != '*' && glob[i] != '?'; ++i) {
    if (glob[i] == '<' || glob[i] == '(') ++depth;
    if ((glob[i] == '>' || glob[i] == ')') && depth > 0) --depth;
    if (glob[i] == ' ' && depth == 0) {
      return syntax_error(i, "the glob cannot match: kernel names are matched without their return type ('" +
                                 std::string(glob.substr(0, std::min<std::size_t>(i, 48))) +
                                 "'), e.g. \"ns::kernel<float>\" or \"ns::kernel\"");
    }
  }
  // A kernel's parameter list is dropped before matching: no match name ends with ')'.
  if (glob.back() == ')') {
    std::size_t open = glob.size() - 1;
    for (std::size_t i = glob.size(), d = 0; i-- > 0;) {
      if (glob[i] == ')') ++d;
      if (glob[i] == '(' && --d == 0) {
        open = i;
        break;
      }
    }
    return syntax_error(open, "the glob cannot match: kernel names are matched without their parameter list");
  }
  return std::nullopt;
}

std::vector<policy_override> parse_policy_overrides(std::string_view spec) {
  std::vector<policy_override> out;
  std::size_t begin = 0;
  while (begin <= spec.size()) {
    std::size_t end = spec.find(';', begin);
    if (end == std::string_view::npos) end = spec.size();
    std::size_t entry_pos = begin;
    const std::string_view entry = trim(spec.substr(begin, end - begin), &entry_pos);
    if (!entry.empty()) {
      const std::size_t eq = entry.find('=');
      if (eq == std::string_view::npos) {
        throw syntax_error(entry_pos, "expected <kernel glob>=<policy>, found no '='");
      }
      const std::string_view glob = trim(entry.substr(0, eq));  // starts at entry_pos: entry is trimmed
      if (glob.empty()) throw syntax_error(entry_pos, "expected a kernel name glob before '='");
      if (auto refused = glob_refusal(glob)) throw syntax_error(entry_pos + refused->pos, refused->what());
      const std::size_t policy_pos = entry_pos + eq + 1;
      try {
        out.push_back({std::string(glob), make_parsed_policy(parse_policy_string(entry.substr(eq + 1)))});
      } catch (const syntax_error& e) {
        throw syntax_error(policy_pos + e.pos, e.what());
      }
    }
    begin = end + 1;
  }
  return out;
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

resolved_policies& resolved() {
  static resolved_policies& r = *new resolved_policies;  // never destroyed: static destructors may launch
  return r;
}

std::atomic<std::uint64_t> policy_string_parses{0};

}  // namespace

namespace detail {
std::uint64_t policy_string_parse_count() noexcept { return policy_string_parses.load(std::memory_order_relaxed); }
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
    made = detail::make_parsed_policy(detail::parse_policy_string(text));  // no lock held: a factory may parse
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
    e = detail::is_builtin_policy(*made) ? resolved_policies::entry{made, {}} : resolved_policies::entry{{}, made};
  }
  return made;
}

namespace {

struct override_table {
  std::shared_mutex mutex;
  bool loaded = false;  // from LAUNCHFIT_POLICY or set_policy_overrides()
  std::vector<detail::policy_override> entries;
  std::optional<error> env_error;  // a bad LAUNCHFIT_POLICY is reported on every lookup, not once
};

// Created on first use and never destroyed: a plan miss from a static destructor still finds it.
override_table& overrides() {
  static override_table& table = *new override_table;
  return table;
}

// Constant-initialised and trivially destructible: readable at any point of the process's life.
std::atomic<std::uint64_t> generation{0};

// `label` names the source in the message, `what` in a refusal of its length.
std::vector<detail::policy_override> parse_overrides(std::string_view spec, std::string_view label,
                                                     std::string_view what) {
  try {
    detail::check_length(spec, what);
    return detail::parse_policy_overrides(spec);
  } catch (const detail::syntax_error& e) {
    detail::throw_syntax_error("policy overrides", label, spec, e);
  }
}

}  // namespace

std::uint64_t detail::policy_overrides_generation() noexcept {
  return generation.load(std::memory_order_acquire);
}

void set_policy_overrides(std::string_view spec) {
  auto entries = parse_overrides(spec, "policy overrides", "a policy override spec");
  auto& table = overrides();
  std::unique_lock lock(table.mutex);
  std::swap(table.entries, entries);  // the old policies are destroyed below, after the lock (plugin code)
  table.env_error.reset();
  table.loaded = true;
  generation.fetch_add(1, std::memory_order_acq_rel);
  lock.unlock();
  detail::plan_inputs_changed("policy overrides");  // every plan was chosen under the old overrides
}

namespace {

// The override table, LAUNCHFIT_POLICY loaded on first use; held by the returned shared lock.
std::shared_lock<std::shared_mutex> loaded_overrides(override_table& table) {
  std::shared_lock lock(table.mutex);
  if (!table.loaded) {
    lock.unlock();
    {
      std::unique_lock write(table.mutex);
      if (!table.loaded) {
        const char* env = std::getenv("LAUNCHFIT_POLICY");
        try {
          if (env) table.entries = parse_overrides(env, "LAUNCHFIT_POLICY", "LAUNCHFIT_POLICY");
        } catch (const error& e) {
          table.env_error = e;
        }
        table.loaded = true;
        generation.fetch_add(1, std::memory_order_acq_rel);
      }
    }
    lock.lock();
  }
  if (table.env_error) throw *table.env_error;
  return lock;
}

}  // namespace

bool detail::policy_overrides_configured() {
  auto& table = overrides();
  const auto lock = loaded_overrides(table);
  return !table.entries.empty();
}

std::shared_ptr<const policy> policy_override_for(std::string_view demangled_kernel, std::string* matched) {
  auto& table = overrides();
  const auto lock = loaded_overrides(table);
  if (table.entries.empty()) return nullptr;
  const auto names = detail::match_names(demangled_kernel);
  for (const auto& entry : table.entries) {
    if (detail::glob_match(entry.glob, names.with_template_args) ||
        detail::glob_match(entry.glob, names.without_template_args)) {
      if (matched) *matched = entry.glob;
      return entry.chosen;
    }
  }
  return nullptr;
}

}  // namespace launchfit

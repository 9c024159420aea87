// policy_from_string() and per-kernel overrides (LAUNCHFIT_POLICY).

#include "policy_string.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>

#include "launchfit/error.hpp"

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
      for (;;) {
        if (!is_name_start(peek())) fail("expected a parameter name or ')', got " + found(text_, pos_));
        policy_param p;
        p.key_pos = pos_;
        p.key = name();
        for (const auto& earlier : out.params) {
          if (earlier.key == p.key) fail("parameter '" + p.key + "' given twice", p.key_pos);
        }
        skip_space();
        if (peek() != '=') fail("expected '=' after '" + p.key + "', got " + found(text_, pos_));
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

// The key quoted in params_assign's messages: "parameter 'k': ..." or "unknown parameter 'k' (...)".
std::string quoted_key(const std::string& message) {
  const auto open = message.find('\'');
  if (open == std::string::npos) return {};
  const auto close = message.find('\'', open + 1);
  return close == std::string::npos ? std::string() : message.substr(open + 1, close - open - 1);
}

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
  } catch (const error& e) {
    std::size_t at = parsed.name_pos;
    if (e.cuda_error() == "LAUNCHFIT_BAD_POLICY_PARAMETER") {
      const std::string key = quoted_key(e.message().substr(e.message().find(": ") + 1));
      const bool unknown_key = e.message().find("unknown parameter") != std::string::npos;
      for (const auto& p : parsed.params) {
        if (p.key == key) at = unknown_key ? p.key_pos : p.value_pos;
      }
    }
    throw syntax_error(at, e.message());
  }
}

void throw_syntax_error(std::string_view call, std::string_view label, std::string_view source,
                        const syntax_error& e) {
  const std::size_t pos = std::min(e.pos, source.size());
  // Control characters would shift the caret; show them as '?' (whitespace as ' ').
  std::string shown(source);
  for (char& c : shown) {
    if (is_space(c))
      c = ' ';
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  }
  std::string message = std::string(label) + " \"" + shown + "\" col " + std::to_string(pos + 1) + ": " +
                        e.what() + "\n  " + shown + "\n  " + std::string(pos, ' ') + '^';
  throw error(std::string(call), "LAUNCHFIT_BAD_POLICY_STRING", std::move(message));
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
      const std::string_view glob = trim(entry.substr(0, eq));
      if (glob.empty()) throw syntax_error(entry_pos, "expected a kernel name glob before '='");
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

std::shared_ptr<const policy> policy_from_string(std::string_view text) {
  try {
    return detail::make_parsed_policy(detail::parse_policy_string(text));
  } catch (const detail::syntax_error& e) {
    detail::throw_syntax_error("policy_from_string", "policy string", text, e);
  }
}

namespace {

struct override_table {
  std::shared_mutex mutex;
  bool loaded = false;  // from LAUNCHFIT_POLICY or set_policy_overrides()
  std::vector<detail::policy_override> entries;
  std::optional<error> env_error;  // a bad LAUNCHFIT_POLICY is reported on every lookup, not once
};

override_table& overrides() {
  static override_table table;
  return table;
}

std::vector<detail::policy_override> parse_overrides(std::string_view spec, std::string_view label) {
  try {
    return detail::parse_policy_overrides(spec);
  } catch (const detail::syntax_error& e) {
    detail::throw_syntax_error("policy overrides", label, spec, e);
  }
}

}  // namespace

void set_policy_overrides(std::string_view spec) {
  auto entries = parse_overrides(spec, "policy overrides");
  auto& table = overrides();
  std::unique_lock lock(table.mutex);
  table.entries = std::move(entries);
  table.env_error.reset();
  table.loaded = true;
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
          if (env) table.entries = parse_overrides(env, "LAUNCHFIT_POLICY");
        } catch (const error& e) {
          table.env_error = e;
        }
        table.loaded = true;
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

// SPDX-License-Identifier: MIT
#pragma once
// Untrusted text (file contents, environment variables, plugin output, kernel names, policy strings) as
// launchfit shows or stores it: one rule set for logs, plans, tools, plugins and the policy parser, so
// that no reader of a log line or a message can be misled by the bytes of one field. escape_text() and
// quote_text() are declared in launchfit/detail/text.hpp, for the public headers that quote a value.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "launchfit/builtin_policies.hpp"  // fnv1a_byte
#include "launchfit/detail/text.hpp"

namespace launchfit::detail {

// A line assembled from pieces escaped already (a log message, an explanation quoting a value), made safe
// as a whole: as escape_text() but '\' is kept, so the escapes the pieces hold read as they are.
std::string escape_line(std::string_view s, std::size_t max_bytes);

// FNV-1a over length-prefixed fields, so that no two field lists hash the same text: the remote store's key names
// (stored: its start value is part of the format) and the bytes a graph node's arguments are compared by.
struct field_hash {
  std::uint64_t h = fnv1a_basis;
  void byte(unsigned char b) noexcept { h = fnv1a_byte(h, b); }
  void number(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  void text(std::string_view s) noexcept {
    number(s.size());
    for (const char c : s) byte(static_cast<unsigned char>(c));
  }
  // Sixteen lowercase hex digits.
  std::string hex() const {
    constexpr std::string_view digits = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[15 - i] = digits[(h >> (4 * i)) & 0xf];
    return out;
  }
};

// Appends `prefix` and the low `digits` hex digits of v, lowercase ("\\x1b", "~x" "ff").
void append_hex(std::string& out, const char* prefix, std::uint32_t v, int digits);

// `s` as valid UTF-8 for a serializer that escapes everything else (a JSON string): each invalid byte
// becomes U+FFFD; at most max_bytes, never cut inside a character, then "...(N bytes)" when cut.
std::string valid_utf8(std::string_view s, std::size_t max_bytes = 256);

// `s` for a value stored back (a device name in a key): each invalid byte and each code point that
// escape_text() would escape (but '\') becomes '?'; at most max_bytes, cut at a character boundary, no
// marker. sanitize_text(sanitize_text(s, n), n) == sanitize_text(s, n).
std::string sanitize_text(std::string_view s, std::size_t max_bytes);

// Whether `s` is at most max_bytes and sanitize_text() would leave it as it is: for validators that
// refuse text rather than rewrite it.
bool is_clean_text(std::string_view s, std::size_t max_bytes);

// `s` as a logfmt value: bare when it is not empty and holds only printable ASCII other than '=' and '"';
// else between double quotes, with '"' and '\' escaped as \" and \\, \n \r \t by name and every other
// control or non-ASCII code point as \uNNNN (a surrogate pair above U+FFFF; U+FFFD for an invalid byte),
// as JSON strings are, so logfmt and JSON readers alike get `s` back. At most max_bytes of `s`, never cut
// inside a character; a longer `s` ends in "...(N bytes)" inside the quotes.
std::string logfmt_value(std::string_view s, std::size_t max_bytes = 256);

// The character of `s` at byte `at` as escape_text() shows it (quote_text() when `quote` is not '\0',
// escape_line() with `keep_backslash`), appended to `out`; returns the bytes of `s` it covers (at least 1).
// For callers that lay out escaped text themselves, such as a caret under a column.
std::size_t escape_char(std::string_view s, std::size_t at, std::string& out, char quote = '\0',
                        bool keep_backslash = false);

}  // namespace launchfit::detail

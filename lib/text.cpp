// SPDX-License-Identifier: MIT
#include "text.hpp"

#include <algorithm>
#include <cstdint>

namespace launchfit::detail {

void append_hex(std::string& out, const char* prefix, std::uint32_t v, int digits) {
  constexpr char hex_digits[] = "0123456789abcdef";
  out += prefix;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += hex_digits[(v >> shift) & 15];
}

namespace {

// Bytes of the well-formed UTF-8 sequence at s[at] (Unicode table 3-7: no overlong form, no surrogate,
// nothing above U+10FFFF), its code point in `cp`; 0 when the byte there starts none.
std::size_t utf8_sequence(std::string_view s, std::size_t at, std::uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[at]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range; later bytes are always 80..BF
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() - at < len) return 0;
  cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
  for (std::size_t k = 1; k < len; ++k) {
    const auto t = static_cast<unsigned char>(s[at + k]);
    if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xbf)) return 0;
    cp = (cp << 6) | (t & 0x3f);
  }
  return len;
}

// Code points that change how a line reads without showing themselves: C1 controls (CSI, NEL...), line
// and paragraph separators, bidirectional marks, embeddings, overrides and isolates, and the BOM.
bool invisible_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f || cp == 0x2028 ||
         cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

bool unsafe_code_point(std::uint32_t cp) { return cp < 0x20 || cp == 0x7f || invisible_control(cp); }


std::string escape(std::string_view s, std::size_t max_bytes, char quote, bool keep_backslash = false) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 26);
  if (quote) out += quote;
  const std::size_t limit = out.size() + std::min(max_bytes, static_cast<std::size_t>(-1) - out.size());
  std::size_t i = 0;
  while (i < s.size()) {
    // A run of printable ASCII other than the backslash and the quote (most text) is its own escape: copied
    // at once, one byte per character, so a cut falls between characters.
    std::size_t run = i;
    while (run < s.size()) {
      const auto c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c >= 0x7f || c == '\\' || (quote && c == static_cast<unsigned char>(quote))) break;
      ++run;
    }
    if (run > i) {
      const std::size_t take = std::min(run - i, limit - out.size());
      out.append(s.data() + i, take);
      i += take;
      if (i < run) break;  // the limit
      continue;
    }
    const std::size_t mark = out.size();
    const std::size_t n = escape_char(s, i, out, quote, keep_backslash);
    if (out.size() > limit) {  // the whole character or escape, or none of it
      out.resize(mark);
      break;
    }
    i += n;
  }
  if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  if (quote) out += quote;
  return out;
}

}  // namespace

std::size_t escape_char(std::string_view s, std::size_t at, std::string& out, char quote,
                        bool keep_backslash) {
  std::uint32_t cp = 0;
  const std::size_t n = utf8_sequence(s, at, cp);
  if (n == 0) {
    append_hex(out, "\\x", static_cast<unsigned char>(s[at]), 2);
    return 1;
  }
  switch (cp) {
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\\':
      out += keep_backslash ? "\\" : "\\\\";
      break;
    default:
      if (quote && cp == static_cast<unsigned char>(quote)) {
        out += '\\';
        out += quote;
      } else if (cp < 0x20 || cp == 0x7f) {
        append_hex(out, "\\x", cp, 2);
      } else if (invisible_control(cp)) {
        append_hex(out, "\\u", cp, 4);
      } else {
        out.append(s.data() + at, n);
      }
  }
  return n;
}

std::string escape_text(std::string_view s, std::size_t max_bytes) { return escape(s, max_bytes, '\0'); }

std::string quote_text(std::string_view s, std::size_t max_bytes, char quote) {
  return escape(s, max_bytes, quote == '\'' ? quote : '"');  // any other byte could be half of a character
}

std::string escape_line(std::string_view s, std::size_t max_bytes) {
  return escape(s, max_bytes, '\0', true);
}

std::string valid_utf8(std::string_view s, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 24);
  std::size_t i = 0;
  while (i < s.size()) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (out.size() + (n > 0 ? n : 3) > max_bytes) break;
    if (n > 0) {
      out.append(s.data() + i, n);
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
    }
    i += n > 0 ? n : 1;
  }
  if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string sanitize_text(std::string_view s, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    const bool keep = n > 0 && !unsafe_code_point(cp);
    if (out.size() + (keep ? n : 1) > max_bytes) break;
    if (keep) {
      out.append(s.data() + i, n);
    } else {
      out += '?';
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

bool is_clean_text(std::string_view s, std::size_t max_bytes) {
  if (s.size() > max_bytes) return false;
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0 || unsafe_code_point(cp)) return false;
    i += n;
  }
  return true;
}

std::string logfmt_value(std::string_view s, std::size_t max_bytes) {
  const bool bare = !s.empty() && s.size() <= max_bytes && std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c > 0x20 && c < 0x7f && c != '=' && c != '"';
  });
  if (bare) return std::string(s);
  std::string out = "\"";
  std::size_t i = 0;
  while (i < s.size() && i < max_bytes) {
    std::uint32_t cp = 0;
    std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      n = 1;
      cp = 0xfffd;
    }
    if (i + n > max_bytes) break;  // never half a character
    i += n;
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0x20 && cp < 0x7f) {
      out += static_cast<char>(cp);
    } else if (cp > 0xffff) {
      const std::uint32_t v = cp - 0x10000;
      append_hex(out, "\\u", 0xd800 + (v >> 10), 4);
      append_hex(out, "\\u", 0xdc00 + (v & 0x3ff), 4);
    } else {
      append_hex(out, "\\u", cp, 4);
    }
  }
  if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  out += '"';
  return out;
}

}  // namespace launchfit::detail

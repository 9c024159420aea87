// SPDX-License-Identifier: MIT
// The key scheme and value codec of a key-value plan store (kv_scheme.hpp).

#include "kv_scheme.hpp"

#include <cuda.h>

#include <exception>
#include <utility>

#include "../plan_match.hpp"
#include "device_match.hpp"
#include "../text.hpp"

namespace launchfit::detail {
namespace {

bool is_hex16(std::string_view s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// %XX decoded; nullopt for a '%' without two hex digits. A decoded control character or NUL is refused
// too: AUTH sends the bytes as they are, and no password of a store holds one.
std::optional<std::string> percent_decoded(std::string_view s) {
  std::string out;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return std::nullopt;
    const int c = hex(s[i + 1]) * 16 + hex(s[i + 2]);
    if (c < 0x20 || c == 0x7f) return std::nullopt;
    out += static_cast<char>(c);
    i += 2;
  }
  return out;
}

}  // namespace

std::string remote_origin(const remote_url& u) {
  const bool v6 = u.host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port) + "/" +
         std::to_string(u.db);
}

std::string redact_url(std::string_view text) {
  const std::size_t scheme = text.find("://");
  if (scheme == std::string_view::npos) return std::string(text);
  const std::size_t start = scheme + 3;
  // The last '@' anywhere: a password may hold '/' or '@' unencoded, and no host or path holds '@'.
  const std::size_t at = text.substr(start).rfind('@');
  if (at == std::string_view::npos) return std::string(text);
  const std::string_view info = text.substr(start, at);
  const std::size_t colon = info.find(':');
  if (colon == std::string_view::npos) return std::string(text);  // a user alone: no secret
  return std::string(text.substr(0, start + colon)) + ":***" + std::string(text.substr(start + at));
}

std::optional<remote_url> parse_remote_url(std::string_view text, std::string& why) {
  constexpr std::size_t max_url = 256;
  if (text.size() > max_url) {
    why = "longer than " + std::to_string(max_url) + " bytes";
    return std::nullopt;
  }
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      why = "it holds a space, a control character or a non-ASCII byte";
      return std::nullopt;
    }
  }
  constexpr std::string_view scheme = "redis://";
  if (text.compare(0, scheme.size(), scheme) != 0) {
    why = text.find("://") == std::string_view::npos ? "not a URL"
                                                     : "unknown scheme (only redis:// is supported)";
    return std::nullopt;
  }
  std::string_view rest = text.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    why = "a query or fragment is not supported";
    return std::nullopt;
  }
  remote_url out;
  out.text = redact_url(text);
  // User info: everything before the last '@' (no host or database holds one; a password may hold '@' or
  // '/' unencoded), so that redact_url() and this agree on what the password is.
  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view info = rest.substr(0, at);
    const std::size_t colon = info.find(':');
    const std::optional<std::string> user = percent_decoded(info.substr(0, colon));
    const std::optional<std::string> password =
        colon == std::string_view::npos ? std::string() : percent_decoded(info.substr(colon + 1));
    if (!user || !password) {
      why = "a user or password with a '%' that is not followed by two hex digits";
      return std::nullopt;
    }
    if (colon != std::string_view::npos && password->empty()) {
      why = "an empty password after ':'";
      return std::nullopt;
    }
    if (user->empty() && password->empty()) {
      why = "an empty user before '@'";
      return std::nullopt;
    }
    out.user = *user;
    out.password = *password;
    rest.remove_prefix(at + 1);
  }
  const std::size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  std::string_view port;
  bool has_port = false;
  if (!hostport.empty() && hostport[0] == '[') {
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) {
      why = "an IPv6 address without its closing ']'";
      return std::nullopt;
    }
    out.host = std::string(hostport.substr(1, close - 1));
    if (out.host.empty() || out.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
      why = "not an IPv6 address between the brackets";
      return std::nullopt;
    }
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        why = "text after the IPv6 address that is not ':port'";
        return std::nullopt;
      }
      has_port = true;
      port = after.substr(1);
    }
  } else {
    const std::size_t colon = hostport.find(':');
    if (colon != std::string_view::npos && hostport.find(':', colon + 1) != std::string_view::npos) {
      why = "an IPv6 address must be written in brackets";
      return std::nullopt;
    }
    out.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      has_port = true;
      port = hostport.substr(colon + 1);
    }
    if (out.host.empty() ||
        out.host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
            std::string::npos ||
        out.host[0] == '-' || out.host.size() > 253) {
      why = out.host.empty() ? "no host" : "not a host name or address";
      return std::nullopt;
    }
  }
  const auto number = [](std::string_view s, long max, long& v) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    v = 0;
    for (const char c : s) v = v * 10 + (c - '0');
    return v <= max;
  };
  if (has_port) {
    long p = 0;
    if (!number(port, 65535, p) || p == 0) {
      why = port.empty() ? "an empty port" : "the port is not a number in 1..65535";
      return std::nullopt;
    }
    out.port = static_cast<int>(p);
  }
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    long d = 0;
    if (!db.empty() && !number(db, 65535, d)) {
      why = "the database is not a number in 0..65535";
      return std::nullopt;
    }
    out.db = static_cast<int>(d);
  }
  return out;
}

std::string remote_model_prefix(const stored_key& k) {
  if (k.device_name.empty()) return "";
  field_hash h;
  h.text(k.device_name);
  h.number(static_cast<std::uint64_t>(k.cc));
  h.number(static_cast<std::uint64_t>(k.sm_count));
  h.number(k.l2_bytes);
  h.number(is_mig_slice(k) ? 1 : 0);
  h.number(static_cast<std::uint64_t>(k.driver_version));
  h.number(static_cast<std::uint64_t>(CUDA_VERSION));  // the toolkit this launchfit was built with
  return std::string(remote_key_base) + h.hex() + ":";
}

std::string remote_key(const stored_key& k) {
  std::string prefix = remote_model_prefix(k);
  if (prefix.empty()) return prefix;
  field_hash h;
  h.text(k.kernel);
  h.text(k.policy);
  h.text(k.smem_rule);
  h.number(k.bucket);
  return prefix + h.hex();
}

bool is_remote_key(std::string_view text) noexcept {
  if (text.size() != remote_key_bytes || text.compare(0, remote_key_base.size(), remote_key_base) != 0)
    return false;
  const std::string_view rest = text.substr(remote_key_base.size());
  return is_hex16(rest.substr(0, 16)) && rest[16] == ':' && is_hex16(rest.substr(17));
}

std::string remote_value(const stored_entry& e) { return serialize_cache_file({e}); }

std::optional<stored_entry> parse_remote_value(std::string_view value, std::string_view key_name,
                                               std::string& why, std::string* stamp_cleared) {
  try {
    if (value.size() > remote_max_value_bytes) {
      why = "a value of " + std::to_string(value.size()) + " bytes is above the limit of " +
            std::to_string(remote_max_value_bytes);
      return std::nullopt;
    }
    cache_file_contents c = parse_cache_file(value);
    if (c.status != cache_file_status::ok) {
      why = c.status == cache_file_status::empty ? "an empty value" : c.problem;
      return std::nullopt;
    }
    if (c.skipped > 0) {
      why = c.problem;
      return std::nullopt;
    }
    if (c.entries.size() != 1) {
      why = std::to_string(c.entries.size()) + " entries where one is stored";
      return std::nullopt;
    }
    stored_entry e = std::move(c.entries.front());
    if (e.key.device_name.empty()) {
      why = "the entry names no device model";
      return std::nullopt;
    }
    if (remote_key(e.key) != key_name) {
      why = "the entry's key is not the one it is stored under (copied, forged, or another toolkit's)";
      return std::nullopt;
    }
    // parse_cache_file() validated it already; said again so that no later change of the parser skips it.
    if (std::string refused = validate_stored_entry(e); !refused.empty()) {
      why = std::move(refused);
      return std::nullopt;
    }
    e.plan.match = plan_match::remote;
    if (stamp_cleared && !c.clamps.empty()) *stamp_cleared = c.clamps.front();
    return e;
  } catch (const std::exception& ex) {  // out of memory, or a parser error nobody foresaw
    why = ex.what();
    return std::nullopt;
  }
}

}  // namespace launchfit::detail

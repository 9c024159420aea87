// SPDX-License-Identifier: MIT
#pragma once
// Internal: how plans are kept in a key-value store (Redis today; any store that maps a key to a string
// value): the store's URL, the key scheme, the value codec and the entries' time to live. No I/O here.
//
// Plans are shared by every GPU of one device model: a key names the model (name, compute capability, SM
// count, L2 size, MIG or not), the driver and toolkit versions, the kernel's fingerprint, the policy text
// (with its launch-option words), the smem rule and the size bucket, never a GPU's UUID:
//
//   launchfit:v1:f1:<16 hex: model, driver, toolkit>:<16 hex: kernel, policy, smem rule, bucket>
//
// A value is a one-entry plan-cache document (serialize_cache_file), at most 64 KiB, read back through the
// file's own parser and checked by the same function as an entry of the file (validate_stored_entry); its
// stored key must hash to the key it was found under and equal the key looked up, so a hash collision
// never serves another kernel's plan.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "../plan_file_format.hpp"

namespace launchfit::detail {

struct remote_url {
  std::string host;  // a host name, an IPv4 address, or an IPv6 address without its brackets
  int port = 6379;
  int db = 0;
  std::string user;      // for AUTH user password (empty: AUTH password, or no AUTH)
  std::string password;  // for AUTH (empty: none); never shown: `text` holds it as ***
  // As given, its password replaced by *** (redact_url()): the only form of the URL that is ever shown.
  std::string text;
};

// redis://[user[:password]@]host[:port][/db]: port 1..65535 (default 6379), db 0..65535 (default 0), at
// most 256 bytes of printable ASCII; user and password percent-decoded (%40 for '@', %2F for '/', %3A for
// ':' in a user). nullopt for anything else, `why` saying what is wrong (the text itself not included).
std::optional<remote_url> parse_remote_url(std::string_view text, std::string& why);

// "redis://host:port/db" (an IPv6 host in brackets): where an entry read from this store came from, as a
// backfilled or pulled entry records it. Never a user or password, whatever the URL held.
std::string remote_origin(const remote_url& u);

// The text of a URL as it may be shown: "redis://user:***@host:port/db" for "redis://user:pw@host:port/db";
// any text with "://" whose authority holds '@' loses what lies between the first ':' of its user info and
// the last '@'. Text without user info is returned as it is.
std::string redact_url(std::string_view text);

// Largest value read or written: a longer one is never served.
inline constexpr std::size_t remote_max_value_bytes = 64 * 1024;
// Entries expire this long after they are written unless LAUNCHFIT_REMOTE_TTL (settings.hpp) says otherwise.
inline constexpr std::uint64_t remote_default_ttl_s = 30ull * 24 * 3600;
// Every key of this format version starts with this.
inline constexpr std::string_view remote_key_base = "launchfit:v1:f1:";
// The length of every key remote_key() gives: the base, 16 hex, ':', 16 hex.
inline constexpr std::size_t remote_key_bytes = remote_key_base.size() + 33;

// "launchfit:v1:f1:<16 hex>:", the prefix of every key of this key's device model, driver and toolkit;
// "" for a key without a device model (an older writer's entry: used for its own GPU only, never shared).
std::string remote_model_prefix(const stored_key& k);
// The prefix and 16 hex of the kernel fingerprint, policy text, smem rule and bucket; "" as above.
std::string remote_key(const stored_key& k);
// Whether text has the shape remote_key() gives (base, 16 hex, ':', 16 hex).
bool is_remote_key(std::string_view text) noexcept;
// The value stored for an entry: serialize_cache_file({e}).
std::string remote_value(const stored_entry& e);
// A value read under `key_name`, parsed and validated as an entry of the file (parse_cache_file, then
// validate_stored_entry): a launchfit plan-cache document of this format version with exactly one good
// entry, naming a device model, whose stored key hashes to `key_name`. nullopt with `why` otherwise. The
// plan's match is "remote". Every reader and writer of a store decides "valid" here. Never throws.
// `stamp_cleared` (when given) says, as the parser did, why the entry's stored_at was read as of unknown age
// (more than max_stored_at_skew_ms ahead of this clock); it is left as it was when the stamp was believed.
std::optional<stored_entry> parse_remote_value(std::string_view value, std::string_view key_name,
                                               std::string& why, std::string* stamp_cleared = nullptr);

}  // namespace launchfit::detail

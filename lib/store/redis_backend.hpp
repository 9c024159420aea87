// SPDX-License-Identifier: MIT
#pragma once
// Internal: the Redis transport. One connection to a Redis (or Valkey) server, speaking RESP2 through
// libhiredis, which is loaded at run time; nothing else of launchfit names hiredis. What it guarantees,
// whatever the peer sends:
//
// - an exchange (a pipeline of commands and one reply each) ends by its deadline, reply parsing included:
//   the reader is fed at most 16 KiB at a time and checks the clock every 1,024 reply elements;
// - a reply is bounded before anything is allocated for it: an array announcing more elements than the
//   exchange's budget, a string longer than its bound, or more bytes in all than the exchange may read is
//   refused when announced (or, for a string, once that many bytes are buffered), never built;
// - SIGPIPE from a server that went away is kept from the process.
//
// A failed exchange leaves the connection unusable: the caller drops it.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace launchfit::detail::redis {

using clock = std::chrono::steady_clock;

// A reply as the server sent it (RESP2).
struct reply {
  enum class kind : unsigned char { nil, string, status, error, integer, array };
  kind type = kind::nil;
  long long integer = 0;
  std::string text;             // string, status, error
  std::vector<reply> elements;  // array
};

using command = std::vector<std::string>;

// What one exchange may read. Elements count every reply and every element of an array, nested ones too.
struct reply_bounds {
  std::size_t max_elements = std::size_t(64) * 1024;
  std::size_t max_string_bytes = 64 * 1024 + 1;
  std::size_t max_bytes = std::size_t(8) << 20;  // strings and protocol, all replies together
};

// Why an exchange failed, for the caller's failure rule.
enum class fault {
  none,
  timeout,   // the deadline passed (connecting, sending, waiting or parsing)
  io,        // the connection broke: refused, reset, closed by the server
  protocol,  // not RESP, or a reply over a bound
};

class connection {
 public:
  // Connects to a numeric address (dns.hpp resolves names) by `deadline`. nullptr with `why` when it
  // cannot, or when libhiredis cannot be used (unavailable() says why).
  static std::unique_ptr<connection> open(const std::string& address, int port, clock::time_point deadline,
                                          std::string& why);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // Sends the commands in one pipeline and reads one reply each, by `deadline` and within `bounds`.
  // fault::none with `replies` filled, else the fault with `why`; the connection is then unusable.
  fault exchange(const std::vector<command>& commands, std::vector<reply>& replies,
                 clock::time_point deadline, const reply_bounds& bounds, std::string& why);

  // Bytes read from the server over the connection's life (what the tools count against their bound).
  std::size_t received() const noexcept;

  // In a forked child whose parent thread may have been using this connection: the child's copy of the
  // socket is closed, the parent's state left alone (kept reachable, never freed).
  void abandon() noexcept;

  struct state;

 private:
  explicit connection(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// Why Redis cannot be used in this process ("" when libhiredis was loaded): built without its headers, the
// library missing, or another major version of it.
const std::string& unavailable();

}  // namespace launchfit::detail::redis

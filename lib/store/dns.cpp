// SPDX-License-Identifier: MIT
// A host name resolved within a deadline (dns.hpp).

#include "dns.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace launchfit::detail {

std::optional<std::string> resolve_within(const std::string& host,
                                          std::chrono::steady_clock::time_point deadline, std::string& why) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a6) == 1)
    return host;
  struct result {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::string address, error;
  };
  auto r = std::make_shared<result>();
  try {
    std::thread([r, host] {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
      std::string address, error;
      if (rc == 0 && found) {
        // IPv4 first: "localhost" often lists ::1 first while servers listen on 127.0.0.1.
        const addrinfo* pick = found;
        for (const addrinfo* i = found; i; i = i->ai_next)
          if (i->ai_family == AF_INET) {
            pick = i;
            break;
          }
        char text[INET6_ADDRSTRLEN] = {};
        const void* where =
            pick->ai_family == AF_INET6
                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(pick->ai_addr)->sin6_addr)
                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(pick->ai_addr)->sin_addr);
        if (::inet_ntop(pick->ai_family, where, text, sizeof text)) address = text;
      } else {
        error = ::gai_strerror(rc);
      }
      if (found) ::freeaddrinfo(found);
      std::lock_guard lk(r->m);
      r->done = true;
      r->address = std::move(address);
      r->error = std::move(error);
      r->cv.notify_all();
    }).detach();
  } catch (const std::system_error&) {
    why = "cannot start a thread to resolve the host name";
    return std::nullopt;
  }
  std::unique_lock lk(r->m);
  if (!r->cv.wait_until(lk, deadline, [&] { return r->done; })) {
    why = "the host name was not resolved within the connect bound";
    return std::nullopt;
  }
  if (r->address.empty()) {
    why = "cannot resolve the host name (" + r->error + ")";
    return std::nullopt;
  }
  return r->address;
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
#pragma once
// A few Redis commands over a plain socket, independent of launchfit's client: for tests to look at what
// launchfit wrote (and to write what a hostile peer would). Blocking, with a 5 s receive timeout.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace launchfit_test {

struct redis_reply {
  char type = 0;     // '+', '-', ':', '$', '*'; 0 when the connection failed
  std::string text;  // status, error, integer or bulk text
  bool nil = false;  // $-1 or *-1
  std::vector<redis_reply> elements;
};

class raw_redis {
 public:
  raw_redis(const std::string& host, int port, int db = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ >= 0 && db != 0) command({"SELECT", std::to_string(db)});
  }
  ~raw_redis() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_redis(const raw_redis&) = delete;
  raw_redis& operator=(const raw_redis&) = delete;

  bool connected() const { return fd_ >= 0; }

  redis_reply command(const std::vector<std::string>& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = ::send(fd_, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return {};
      done += static_cast<std::size_t>(n);
    }
    return read_reply();
  }

  // Every key of the database (SCAN to the end).
  std::vector<std::string> keys() {
    std::vector<std::string> out;
    std::string cursor = "0";
    do {
      const redis_reply r = command({"SCAN", cursor, "COUNT", "1000"});
      if (r.type != '*' || r.elements.size() != 2) return out;
      cursor = r.elements[0].text;
      for (const auto& k : r.elements[1].elements) out.push_back(k.text);
    } while (cursor != "0");
    return out;
  }

 private:
  redis_reply read_reply() {
    redis_reply r;
    const std::string line = read_line();
    if (line.empty()) return r;
    r.type = line[0];
    r.text = line.substr(1);
    if (r.type == '$' || r.type == '*') {
      const long n = std::stol(r.text);
      if (n < 0) {
        r.nil = true;
        return r;
      }
      if (r.type == '$') {
        r.text = read_exact(static_cast<std::size_t>(n) + 2).substr(0, static_cast<std::size_t>(n));
      } else {
        for (long i = 0; i < n; ++i) r.elements.push_back(read_reply());
      }
    }
    return r;
  }
  std::string read_line() {
    std::string line;
    while (line.size() < 2 || line.compare(line.size() - 2, 2, "\r\n") != 0) {
      const std::string c = read_exact(1);
      if (c.empty()) return line;
      line += c;
    }
    return line.substr(0, line.size() - 2);
  }
  std::string read_exact(std::size_t n) {
    std::string out;
    while (out.size() < n) {
      if (at_ == buf_.size()) {
        char tmp[65536];
        const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
        if (got <= 0) return out;
        buf_.assign(tmp, static_cast<std::size_t>(got));
        at_ = 0;
      }
      const std::size_t take = std::min(n - out.size(), buf_.size() - at_);
      out.append(buf_, at_, take);
      at_ += take;
    }
    return out;
  }
  int fd_ = -1;
  std::string buf_;
  std::size_t at_ = 0;
};

}  // namespace launchfit_test

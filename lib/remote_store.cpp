// SPDX-License-Identifier: MIT
// The remote plan store on Redis (remote_store.hpp).
//
// libhiredis is loaded at run time, as libcuda is (driver.cpp): neither the library nor its users link it,
// and a machine without it gets one warning. Its header is used for types only; the library loaded must be
// the ABI the header describes (hiredis 1.x changed redisContext and redisReply), which is checked.
//
// Two connections per store, each used by one thread at a time under its own mutex: one for lookups (the
// caller's thread, on a miss) and one for the background writer, so a lookup never waits behind a batch
// of writes. Every socket operation is bounded by SO_RCVTIMEO/SO_SNDTIMEO (redisSetTimeout); SIGPIPE from
// a server that went away is kept from the process.

#include "remote_store.hpp"

#include <cuda.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <new>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_inputs.hpp"
#include "text.hpp"

// LAUNCHFIT_NO_HIREDIS builds the library with the remote store always off.
#if __has_include(<hiredis/hiredis.h>) && !defined(LAUNCHFIT_NO_HIREDIS)
#include <hiredis/hiredis.h>
#define LAUNCHFIT_HIREDIS_HEADERS 1
#else
// Built without libhiredis-dev: the store is never on (hiredis_api() says why); these only let the code
// compile.
#define LAUNCHFIT_HIREDIS_HEADERS 0
struct redisReader {
  int err;
  char errstr[128];
  char* buf;
  std::size_t pos;
  std::size_t len;
};
struct redisContext {
  int err;
  char errstr[128];
  int fd;
  redisReader* reader;
};
struct redisReply {
  int type;
  long long integer;
  std::size_t len;
  char* str;
  std::size_t elements;
  redisReply** element;
};
#define REDIS_OK 0
#define REDIS_REPLY_STRING 1
#define REDIS_REPLY_ARRAY 2
#define REDIS_REPLY_INTEGER 3
#define REDIS_REPLY_NIL 4
#define REDIS_REPLY_STATUS 5
#define REDIS_REPLY_ERROR 6
#endif

namespace launchfit::detail {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- hiredis, loaded at run time --------------------------------------------------------------------------

struct hiredis_functions {
  redisContext* (*connect)(const char*, int, const struct timeval) = nullptr;
  int (*set_timeout)(redisContext*, const struct timeval) = nullptr;
  int (*append_argv)(redisContext*, int, const char**, const std::size_t*) = nullptr;
  // redisGetReply in its pieces, so that a reply is read within one deadline and one size bound (a peer that
  // drip-feeds bytes, or announces a gigabyte, would hold or grow a plain redisGetReply without end).
  int (*buffer_write)(redisContext*, int*) = nullptr;
  int (*buffer_read)(redisContext*) = nullptr;
  int (*reply_from_reader)(redisContext*, void**) = nullptr;
  void (*free_reply)(void*) = nullptr;
  void (*free_context)(redisContext*) = nullptr;
  std::string failure;  // empty when usable
};

#define LAUNCHFIT_STRINGIFY2(x) #x
#define LAUNCHFIT_STRINGIFY(x) LAUNCHFIT_STRINGIFY2(x)

hiredis_functions load_hiredis() {
  hiredis_functions f;
#if !LAUNCHFIT_HIREDIS_HEADERS
  f.failure = "this launchfit was built without the hiredis headers (libhiredis-dev)";
  return f;
#else
  // hiredis 1.0 added redisConnectWithOptions and changed the layout of redisContext and redisReply.
  const bool built_for_1x = HIREDIS_MAJOR >= 1;
  const auto abi_matches = [&](void* probe_scope) {
    return (dlsym(probe_scope, "redisConnectWithOptions") != nullptr) == built_for_1x;
  };
  const std::string built = LAUNCHFIT_STRINGIFY(HIREDIS_MAJOR) "." LAUNCHFIT_STRINGIFY(HIREDIS_MINOR);
  // A program that already has a hiredis loaded (linked, or dlopen'ed globally) resolves the symbols of any
  // other copy to its own: use that one when its ABI is ours, never load a second.
  void* scope = nullptr;
  if (dlsym(RTLD_DEFAULT, "redisConnectWithTimeout")) {
    if (!abi_matches(RTLD_DEFAULT)) {
      f.failure =
          "the program already has another major version of hiredis loaded; launchfit was built "
          "against hiredis " +
          built;
      return f;
    }
    scope = RTLD_DEFAULT;
  } else {
    const char* names[] = {"libhiredis.so." LAUNCHFIT_STRINGIFY(HIREDIS_SONAME), "libhiredis.so"};
    std::string why;
    for (const char* name : names) {
      // Leaked on purpose, as libcuda: a static destructor may still hold a context.
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        if (why.empty()) {
          const char* e = dlerror();
          why = e ? e : name;
        }
        continue;
      }
      if (!abi_matches(h)) {
        why = std::string(name) + " is another major version of hiredis than the " + built +
              " launchfit was built against";
        continue;  // left loaded: unloading a library is never safe to assume
      }
      scope = h;
      break;
    }
    if (!scope) {
      f.failure = "cannot load libhiredis (" + why + "); install hiredis " + built;
      return f;
    }
  }
  f.connect = reinterpret_cast<decltype(f.connect)>(dlsym(scope, "redisConnectWithTimeout"));
  f.set_timeout = reinterpret_cast<decltype(f.set_timeout)>(dlsym(scope, "redisSetTimeout"));
  f.append_argv = reinterpret_cast<decltype(f.append_argv)>(dlsym(scope, "redisAppendCommandArgv"));
  f.free_reply = reinterpret_cast<decltype(f.free_reply)>(dlsym(scope, "freeReplyObject"));
  f.buffer_write = reinterpret_cast<decltype(f.buffer_write)>(dlsym(scope, "redisBufferWrite"));
  f.buffer_read = reinterpret_cast<decltype(f.buffer_read)>(dlsym(scope, "redisBufferRead"));
  f.reply_from_reader = reinterpret_cast<decltype(f.reply_from_reader)>(dlsym(scope, "redisGetReplyFromReader"));
  f.free_context = reinterpret_cast<decltype(f.free_context)>(dlsym(scope, "redisFree"));
  if (!f.connect || !f.set_timeout || !f.append_argv || !f.free_reply || !f.free_context ||
      !f.buffer_write || !f.buffer_read || !f.reply_from_reader)
    f.failure = "libhiredis lacks a function launchfit uses";
  return f;
#endif
}

const hiredis_functions& hiredis() {
  static const hiredis_functions& f = *new hiredis_functions(load_hiredis());  // never destroyed
  return f;
}

// ---- one connection ---------------------------------------------------------------------------------------

// A write to a socket the server closed raises SIGPIPE, which would end the user's program: blocked while
// this thread talks to Redis, and one raised meanwhile is taken back before the mask is restored.
class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~sigpipe_guard() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec now{0, 0};
      while (sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t old_{};
  bool was_pending_ = false;
};

struct reply_free {
  void operator()(redisReply* r) const {
    if (r) hiredis().free_reply(r);
  }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;
using command = std::vector<std::string>;

timeval to_timeval(unsigned ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// Contexts a forked child could not free (a thread of its parent was using them): kept reachable.
std::vector<redisContext*>& abandoned_contexts() {
  static auto& v = *new std::vector<redisContext*>;
  return v;
}

// The host as a numeric address, resolved within `ms`. getaddrinfo() has no timeout of its own (a dead
// resolver holds it for the resolv.conf timeouts, seconds): it runs on a thread of its own, left behind when
// it takes longer, so the launch that connects waits at most the connect bound.
std::optional<std::string> resolve_within(const std::string& host, unsigned ms, std::string& why) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return host;
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
        const void* where = pick->ai_family == AF_INET6
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
  if (!r->cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return r->done; })) {
    why = "the host name was not resolved within " + std::to_string(ms) + " ms";
    return std::nullopt;
  }
  if (r->address.empty()) {
    why = "cannot resolve the host name (" + r->error + ")";
    return std::nullopt;
  }
  return r->address;
}

class connection {
 public:
  // nullptr with `why` when it cannot connect, select the database or set the timeout.
  static std::unique_ptr<connection> open(const remote_url& url, unsigned connect_ms, unsigned op_ms,
                                          std::string& why) {
    const hiredis_functions& api = hiredis();
    if (!api.failure.empty()) {
      why = api.failure;
      return nullptr;
    }
    const std::optional<std::string> address = resolve_within(url.host, connect_ms, why);
    if (!address) return nullptr;
    sigpipe_guard guard;
    redisContext* c = api.connect(address->c_str(), url.port, to_timeval(connect_ms));
    if (!c) {
      why = "out of memory";
      return nullptr;
    }
    std::unique_ptr<connection> out(new connection(c, op_ms));
    if (c->err) {
      why = c->errstr;
      return nullptr;
    }
    // A child that execs must not keep the socket open.
    if (c->fd >= 0) ::fcntl(c->fd, F_SETFD, ::fcntl(c->fd, F_GETFD) | FD_CLOEXEC);
    if (api.set_timeout(c, to_timeval(op_ms)) != REDIS_OK) {
      why = "cannot set the socket timeout (" + std::string(c->errstr) + ")";
      return nullptr;
    }
    if (url.db != 0) {
      std::vector<reply_ptr> r;
      if (!out->run({{"SELECT", std::to_string(url.db)}}, r, why)) return nullptr;
      if (r[0]->type != REDIS_REPLY_STATUS) {
        why = "SELECT " + std::to_string(url.db) + " failed (" + reply_text(*r[0]) + ")";
        return nullptr;
      }
    }
    return out;
  }

  ~connection() {
    if (ctx_) hiredis().free_context(ctx_);
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // Sends the commands in one pipeline and reads one reply each, all within the operation timeout and with
  // at most max_reply_bytes buffered. False with `why` on an I/O or protocol failure, a slow or an oversized
  // answer; the connection is then unusable.
  bool run(const std::vector<command>& commands, std::vector<reply_ptr>& replies, std::string& why) {
    const hiredis_functions& api = hiredis();
    sigpipe_guard guard;
    replies.clear();
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& cmd : commands) {
      argv.clear();
      lens.clear();
      for (const auto& a : cmd) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      if (api.append_argv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
        why = failure_text();
        return false;
      }
    }
    const auto deadline = steady::now() + milliseconds(op_ms_);
    for (int done = 0; !done;) {
      if (api.buffer_write(ctx_, &done) != REDIS_OK) {
        why = failure_text();
        return false;
      }
      if (!done && !wait_for(POLLOUT, deadline, why)) return false;
    }
    for (std::size_t i = 0; i < commands.size(); ++i) {
      void* r = nullptr;
      while (true) {
        if (api.reply_from_reader(ctx_, &r) != REDIS_OK) {
          why = failure_text();
          return false;
        }
        if (r) break;
        if (ctx_->reader && ctx_->reader->len > max_reply_bytes) {
          why = "an answer larger than " + std::to_string(max_reply_bytes >> 20) + " MiB";
          return false;
        }
        if (!wait_for(POLLIN, deadline, why) || api.buffer_read(ctx_) != REDIS_OK) {
          if (why.empty()) why = failure_text();
          return false;
        }
      }
      replies.emplace_back(static_cast<redisReply*>(r));
    }
    return true;
  }

  // The most an answer may buffer: a pipeline of 64 values of at most 64 KiB, with room for the protocol.
  static constexpr std::size_t max_reply_bytes = std::size_t(8) << 20;

  // In a forked child whose parent thread may have been using this connection: the child's copy of the
  // socket is closed, the context left as it is.
  void abandon() {
    if (!ctx_) return;
    if (ctx_->fd >= 0) ::close(ctx_->fd);
    abandoned_contexts().push_back(ctx_);
    ctx_ = nullptr;
  }

  static std::string reply_text(const redisReply& r) {
    switch (r.type) {
      case REDIS_REPLY_STRING:
        return "a string of " + std::to_string(r.len) + " bytes";
      case REDIS_REPLY_ARRAY:
        return "an array of " + std::to_string(r.elements);
      case REDIS_REPLY_INTEGER:
        return "the integer " + std::to_string(r.integer);
      case REDIS_REPLY_NIL:
        return "nil";
      case REDIS_REPLY_STATUS:
      case REDIS_REPLY_ERROR:
        return (r.type == REDIS_REPLY_ERROR ? "error: " : "status: ") +
               std::string(r.str ? std::string_view(r.str, std::min<std::size_t>(r.len, 512)) : "");
      default:
        return "a reply of type " + std::to_string(r.type);
    }
  }

 private:
  connection(redisContext* c, unsigned op_ms) : ctx_(c), op_ms_(op_ms) {}

  // Until the socket is ready for `events`, at most until `deadline`. False with `why` when it is not.
  bool wait_for(short events, steady::time_point deadline, std::string& why) const {
    while (true) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now()).count();
      if (left <= 0) {
        why = "no answer within " + std::to_string(op_ms_) + " ms";
        return false;
      }
      pollfd p{ctx_->fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) {
        why = std::string("poll failed (") + std::strerror(errno) + ")";
        return false;
      }
    }
  }

  std::string failure_text() const {
    const std::string e = ctx_->errstr;
    if (e.find("temporarily unavailable") != std::string::npos || e.find("timed out") != std::string::npos)
      return "no answer within " + std::to_string(op_ms_) + " ms";
    return e.empty() ? "I/O error" : e;
  }

  redisContext* ctx_;
  unsigned op_ms_;
};

bool is_string(const redisReply& r) { return r.type == REDIS_REPLY_STRING; }
std::string_view text_of(const redisReply& r) {
  return r.str ? std::string_view(r.str, r.len) : std::string_view();
}

// A SCAN reply: [cursor, [key, ...]]. False with `why` for anything else.
bool scan_reply(const redisReply& r, std::string& cursor, std::vector<std::string>& keys, std::string& why) {
  if (r.type == REDIS_REPLY_ERROR) {
    why = "SCAN failed (" + connection::reply_text(r) + ")";
    return false;
  }
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || !is_string(*r.element[0]) ||
      r.element[1]->type != REDIS_REPLY_ARRAY) {
    why = "SCAN answered " + connection::reply_text(r) + ", not [cursor, keys]";
    return false;
  }
  const std::string_view c = text_of(*r.element[0]);
  if (c.empty() || c.size() > 20 || c.find_first_not_of("0123456789") != std::string_view::npos) {
    why = "SCAN answered a cursor that is not a number";
    return false;
  }
  cursor.assign(c);
  keys.clear();
  const redisReply& list = *r.element[1];
  for (std::size_t i = 0; i < list.elements; ++i) {
    if (!is_string(*list.element[i])) {
      why = "SCAN answered a key that is " + connection::reply_text(*list.element[i]);
      return false;
    }
    keys.emplace_back(text_of(*list.element[i]));
  }
  return true;
}

// GETRANGE reads at most one byte more than a value may hold: a larger value is never transferred.
command read_value(const std::string& key) {
  return {"GETRANGE", key, "0", std::to_string(remote_max_value_bytes)};
}

command write_value(const std::string& key, const std::string& value, std::uint64_t ttl_s) {
  return {"SET", key, value, "NX", "EX", std::to_string(ttl_s)};
}

// ---- keys -------------------------------------------------------------------------------------------------

// FNV-1a over length-prefixed fields, so that no two field lists hash the same text.
struct key_hash {
  std::uint64_t h = 1469598103934665603ull;
  void byte(unsigned char b) {
    h ^= b;
    h *= 1099511628211ull;
  }
  void number(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  void text(std::string_view s) {
    number(s.size());
    for (const char c : s) byte(static_cast<unsigned char>(c));
  }
  std::string hex() const {
    static const char digits[] = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[15 - i] = digits[(h >> (4 * i)) & 0xf];
    return out;
  }
};

bool is_mig(const stored_key& k) {
  return k.device_uuid.rfind("MIG-", 0) == 0 || k.device_name.find(" MIG ") != std::string::npos;
}

bool is_hex16(std::string_view s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// Entries this store may serve for `wanted`: the same model, driver, kernel, policy text and smem rule.
bool serves(const stored_key& stored, const stored_key& wanted) {
  return same_device_model(stored, wanted) && stored.driver_version == wanted.driver_version &&
         stored.kernel == wanted.kernel && stored.policy == wanted.policy &&
         stored.smem_rule == wanted.smem_rule;
}

void sort_for(std::vector<stored_entry>& out, const stored_key& key) {
  const auto rank = [&](const stored_entry& e) {
    const std::uint64_t d = e.key.bucket > key.bucket ? e.key.bucket - key.bucket : key.bucket - e.key.bucket;
    return std::make_tuple(d, ~e.stored_at_ms, std::string_view(e.key.device_uuid));
  };
  std::sort(out.begin(), out.end(),
            [&](const stored_entry& a, const stored_entry& b) { return rank(a) < rank(b); });
}

void warn(const std::string& text) {
  try {
    logger()->warn("{}", text);
  } catch (...) {  // logging never ends a launch
  }
}

}  // namespace

// ---- URL, keys, values ------------------------------------------------------------------------------------

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
  if (rest.find('@') != std::string_view::npos) {
    why = "a user or password in the URL is not supported";
    return std::nullopt;
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    why = "a query or fragment is not supported";
    return std::nullopt;
  }
  remote_url out;
  out.text = std::string(text);
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
  key_hash h;
  h.text(k.device_name);
  h.number(static_cast<std::uint64_t>(k.cc));
  h.number(static_cast<std::uint64_t>(k.sm_count));
  h.number(k.l2_bytes);
  h.number(is_mig(k) ? 1 : 0);
  h.number(static_cast<std::uint64_t>(k.driver_version));
  h.number(static_cast<std::uint64_t>(CUDA_VERSION));  // the toolkit this launchfit was built with
  return std::string(remote_key_base) + h.hex() + ":";
}

std::string remote_key(const stored_key& k) {
  std::string prefix = remote_model_prefix(k);
  if (prefix.empty()) return prefix;
  key_hash h;
  h.text(k.kernel);
  h.text(k.policy);
  h.text(k.smem_rule);
  h.number(k.bucket);
  return prefix + h.hex();
}

bool is_remote_key(std::string_view text) noexcept {
  const std::string_view base = remote_key_base;
  if (text.size() != base.size() + 33 || text.compare(0, base.size(), base) != 0) return false;
  const std::string_view rest = text.substr(base.size());
  return is_hex16(rest.substr(0, 16)) && rest[16] == ':' && is_hex16(rest.substr(17));
}

std::string remote_value(const stored_entry& e) { return serialize_cache_file({e}); }

std::optional<stored_entry> parse_remote_value(std::string_view value, std::string_view key_name,
                                               std::string& why) {
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
    e.plan.match = "remote";
    return e;
  } catch (const std::exception& ex) {  // out of memory, or a parser error nobody foresaw
    why = ex.what();
    return std::nullopt;
  }
}

std::uint64_t remote_ttl_from_env(std::string& warning) {
  constexpr std::uint64_t max_ttl = 10ull * 365 * 24 * 3600;
  const char* v = std::getenv("LAUNCHFIT_REMOTE_TTL");
  if (!v || !*v) return remote_default_ttl_s;
  const std::string_view s = v;
  std::uint64_t n = 0;
  bool ok = s.size() <= 10 && s.find_first_not_of("0123456789") == std::string_view::npos;
  if (ok) {
    for (const char c : s) n = n * 10 + static_cast<std::uint64_t>(c - '0');
    ok = n >= 1 && n <= max_ttl;
  }
  if (ok) return n;
  warning = "LAUNCHFIT_REMOTE_TTL=" + quote_text(s, 64, '\'') + " is not a number of seconds in 1.." +
            std::to_string(max_ttl) + "; using " + std::to_string(remote_default_ttl_s);
  return remote_default_ttl_s;
}

// ---- the layer --------------------------------------------------------------------------------------------

namespace {

struct model_view {
  enum class state { unread, partial, complete };
  state st = state::unread;
  std::map<std::string, std::optional<stored_entry>> slots;  // remote key -> entry (none: absent or refused)
  std::chrono::steady_clock::time_point read_at{};          // when the bulk read ended
};

// How long a bulk read answers "absent" for a key it did not see: a plan another process writes later is
// then read with one round trip on the next miss for it.
constexpr std::chrono::seconds absent_fresh_for{5};

// Per process, so that a child of fork() can make every store its own (connections, writer thread, locks).
struct store_registry {
  std::mutex m;
  std::set<redis_store::impl*> stores;
};
store_registry& registry();

void register_exit_flush();

}  // namespace

struct redis_store::impl {
  explicit impl(remote_options o) : opt(std::move(o)), shown_url(escape_text(opt.url.text, 300)) {}

  remote_options opt;
  std::string shown_url;
  std::atomic<bool> dead{false}, closed{false}, refusal_warned{false};

  std::atomic<std::uint64_t> lookups{0}, hits{0}, refused{0}, loaded{0}, writes{0}, already{0}, drops{0},
      failures{0};

  mutable std::mutex m;  // everything below but the connections; never held across I/O or logging
  std::condition_variable work, done;
  std::deque<stored_entry> queue;
  std::size_t in_flight = 0;
  bool lost = false;    // an entry put since the last flush was not written
  bool failed = false;  // dead, and the failure logged
  bool stop = false;
  pid_t writer_pid = 0;  // the process whose writer thread runs (none in a child of fork())
  std::thread writer;
  std::map<std::string, model_view> models;

  std::mutex lookup_io;  // held across the lookup connection's I/O
  std::unique_ptr<connection> lookup_conn;
  std::mutex write_io;  // held across the writer connection's I/O
  std::unique_ptr<connection> write_conn;

  // A failed operation: the store is dead for the process; the first failure warns.
  void fail(const std::string& why) {
    failures.fetch_add(1, std::memory_order_relaxed);
    if (dead.exchange(true)) return;
    warn("remote plan store " + shown_url + ": " + escape_text(why, 1024) +
         "; not used again by this process (plans are made locally)");
    // After the warning: a flush that returns because of this failure finds it logged.
    std::lock_guard lk(m);
    if (!queue.empty()) lost = true;
    drops.fetch_add(queue.size(), std::memory_order_relaxed);
    queue.clear();
    failed = true;
    done.notify_all();
  }

  void refuse(const std::string& key, const std::string& why) {
    refused.fetch_add(1, std::memory_order_relaxed);
    const std::string text = "remote plan store " + shown_url + ": refused the entry under " +
                             escape_text(key, 128) + " (" + escape_text(why, 1024) + ")";
    if (!refusal_warned.exchange(true)) {
      warn(text + "; later refusals are counted in remote_store_statistics()");
    } else {
      try {
        logger()->debug("{}", text);
      } catch (...) {
      }
    }
  }

  // Under lookup_io.
  connection* lookup_connection() {
    if (!lookup_conn) {
      std::string why;
      lookup_conn = connection::open(opt.url, opt.connect_timeout_ms, opt.op_timeout_ms, why);
      if (!lookup_conn)
        fail("cannot connect to " + opt.url.host + ":" + std::to_string(opt.url.port) + ": " + why);
    }
    return lookup_conn.get();
  }

  // Under lookup_io. A failed exchange drops the connection and kills the store.
  bool ask(const std::vector<command>& cmds, std::vector<reply_ptr>& replies) {
    connection* c = lookup_connection();
    if (!c) return false;
    std::string why;
    if (c->run(cmds, replies, why)) return true;
    lookup_conn.reset();
    fail(why);
    return false;
  }

  // A value read under `key` into the model's slots. False when the reply kills the store.
  bool take_value(const std::string& prefix, const std::string& key, const redisReply& r,
                  std::size_t& bytes) {
    std::optional<stored_entry> entry;
    if (r.type == REDIS_REPLY_STRING) {
      bytes += r.len;
      if (r.len > remote_max_value_bytes) {
        fail("the value under " + key + " is larger than " + std::to_string(remote_max_value_bytes) +
             " bytes");
        return false;
      }
      if (r.len > 0) {
        std::string why;
        entry = parse_remote_value(text_of(r), key, why);
        if (entry) {
          loaded.fetch_add(1, std::memory_order_relaxed);
        } else {
          refuse(key, why);
        }
      }
    } else if (r.type != REDIS_REPLY_NIL) {  // WRONGTYPE and other errors, or not a string at all
      fail("reading " + key + " answered " + connection::reply_text(r));
      return false;
    }
    std::lock_guard lk(m);
    auto& slot = models[prefix].slots[key];
    if (!slot) slot = std::move(entry);  // this process's own put stays
    return true;
  }

  // Under lookup_io: the model's entries, within the bulk bounds.
  void read_model(const std::string& prefix) {
    const auto deadline = steady::now() + milliseconds(opt.bulk_ms);
    std::string cursor = "0";
    std::size_t keys = 0, bytes = 0;
    bool complete = false;
    std::vector<reply_ptr> replies;
    std::vector<std::string> found;
    while (steady::now() < deadline && keys < opt.bulk_max_keys && bytes < opt.bulk_max_bytes) {
      if (!ask({{"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "512"}}, replies)) return;
      std::string why;
      if (!scan_reply(*replies[0], cursor, found, why)) {
        fail(why);
        return;
      }
      std::vector<command> reads;
      std::vector<std::string> names;
      {
        std::lock_guard lk(m);
        const auto& slots = models[prefix].slots;
        for (auto& k : found) {
          if (keys + names.size() >= opt.bulk_max_keys) break;
          if (k.compare(0, prefix.size(), prefix) != 0 || !is_remote_key(k)) continue;  // not ours
          const auto it = slots.find(k);
          if (it != slots.end() && it->second) continue;
          reads.push_back(read_value(k));
          names.push_back(std::move(k));
        }
      }
      // In pipelines of 64, so that the byte bound holds to within 64 values of 64 KiB.
      constexpr std::size_t pipeline = 64;
      bool cut = false;
      for (std::size_t at = 0; at < reads.size() && !cut; at += pipeline) {
        const std::size_t n = std::min(pipeline, reads.size() - at);
        if (!ask({reads.begin() + at, reads.begin() + at + n}, replies)) return;
        for (std::size_t i = 0; i < n; ++i)
          if (!take_value(prefix, names[at + i], *replies[i], bytes)) return;
        keys += n;
        cut = bytes >= opt.bulk_max_bytes || steady::now() >= deadline;
      }
      if (cut) break;
      if (cursor == "0") {
        complete = true;
        break;
      }
    }
    std::lock_guard lk(m);
    models[prefix].st = complete ? model_view::state::complete : model_view::state::partial;
    models[prefix].read_at = std::chrono::steady_clock::now();
  }

  // Under lookup_io: one key, for a model read only in part.
  void read_key(const std::string& prefix, const std::string& key) {
    std::vector<reply_ptr> replies;
    if (!ask({read_value(key)}, replies)) return;
    std::size_t bytes = 0;
    take_value(prefix, key, *replies[0], bytes);
  }

  // Whether the model's slots answer this key without a round trip.
  bool answerable(const std::string& prefix, const std::string& key) const {
    std::lock_guard lk(m);
    const auto it = models.find(prefix);
    if (it == models.end() || it->second.st == model_view::state::unread) return false;
    const auto slot = it->second.slots.find(key);
    if (slot != it->second.slots.end() && slot->second) return true;  // an entry: never changes (first writer wins)
    // Absent (or refused): trusted only while the read is fresh.
    return it->second.st == model_view::state::complete &&
           std::chrono::steady_clock::now() - it->second.read_at < absent_fresh_for;
  }

  std::vector<stored_entry> answer(const stored_key& key, const std::string& prefix) {
    std::vector<stored_entry> out;
    {
      std::lock_guard lk(m);
      const auto it = models.find(prefix);
      if (it == models.end()) return out;
      for (const auto& [k, slot] : it->second.slots)
        if (slot && serves(slot->key, key)) out.push_back(*slot);
    }
    sort_for(out, key);
    hits.fetch_add(out.size(), std::memory_order_relaxed);
    return out;
  }

  std::vector<stored_entry> find(const stored_key& key) {
    if (closed.load(std::memory_order_acquire) || dead.load(std::memory_order_acquire)) return {};
    const std::string rkey = remote_key(key);
    if (rkey.empty()) return {};
    lookups.fetch_add(1, std::memory_order_relaxed);
    const std::string prefix = rkey.substr(0, rkey.size() - 16);
    if (!answerable(prefix, rkey)) {
      std::lock_guard io(lookup_io);
      if (closed.load() || dead.load()) return {};
      bool unread = false;
      {
        std::lock_guard lk(m);
        unread = models[prefix].st == model_view::state::unread;
      }
      if (unread) read_model(prefix);
      if (dead.load()) return {};
      if (!answerable(prefix, rkey)) read_key(prefix, rkey);
      if (dead.load()) return {};
    }
    return answer(key, prefix);
  }

  void put(const stored_entry& e) {
    const std::string rkey = remote_key(e.key);
    std::lock_guard lk(m);
    if (closed.load() || dead.load() || rkey.empty() || queue.size() >= opt.queue_max) {
      drops.fetch_add(1, std::memory_order_relaxed);
      lost = true;
      return;
    }
    queue.push_back(e);
    stored_entry mine = e;
    mine.plan.match = "remote";
    models[rkey.substr(0, rkey.size() - 16)].slots[rkey] = std::move(mine);
    ensure_writer();
    work.notify_one();
  }

  // Under m.
  void ensure_writer() {
    if (writer_pid == ::getpid() || stop) return;
    try {
      writer = std::thread([this] { writer_loop(); });
      writer_pid = ::getpid();
    } catch (const std::system_error&) {
      return;  // no thread: entries stay queued; flush() says so
    }
    if (opt.flush_at_exit) register_exit_flush();
  }

  void writer_loop() {
    // Blocked for good in this thread: a SIGPIPE it raises stays pending here, never reaching the process.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    const pid_t me = ::getpid();
    std::unique_lock lk(m);
    for (;;) {
      if (stop || writer_pid != me) return;
      if (queue.empty()) {
        work.wait(lk);
        continue;
      }
      std::vector<stored_entry> batch;
      while (!queue.empty() && batch.size() < 64) {
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      in_flight = batch.size();
      lk.unlock();
      write_batch(batch);
      lk.lock();
      in_flight = 0;
      done.notify_all();
    }
  }

  void write_batch(const std::vector<stored_entry>& batch) {
    std::size_t unwritten = batch.size();
    std::string why;
    {
      std::lock_guard io(write_io);
      if (!dead.load()) {
        std::vector<command> cmds;
        for (const auto& e : batch) {
          std::string value = remote_value(e);
          if (value.size() > remote_max_value_bytes) continue;  // never stored: too large to be read back
          cmds.push_back(write_value(remote_key(e.key), value, opt.ttl_s));
        }
        if (!write_conn) {
          write_conn = connection::open(opt.url, opt.connect_timeout_ms, opt.op_timeout_ms, why);
          if (!write_conn)
            why = "cannot connect to " + opt.url.host + ":" + std::to_string(opt.url.port) + ": " + why;
        }
        std::vector<reply_ptr> replies;
        if (!write_conn || cmds.empty() || write_conn->run(cmds, replies, why)) {
          for (const auto& r : replies) {
            if (r->type == REDIS_REPLY_STATUS) {
              writes.fetch_add(1, std::memory_order_relaxed);
              --unwritten;
            } else if (r->type == REDIS_REPLY_NIL) {  // NX: another writer was first
              already.fetch_add(1, std::memory_order_relaxed);
              --unwritten;
            } else if (why.empty()) {
              why = "SET answered " + connection::reply_text(*r);
            }
          }
        } else {
          write_conn.reset();
        }
      }
    }
    // Counted before the failure is: a flush that returns because of it sees the whole batch accounted for.
    if (unwritten > 0) {
      drops.fetch_add(unwritten, std::memory_order_relaxed);
      std::lock_guard lk(m);
      lost = true;
    }
    if (!why.empty()) fail(why);
  }

  bool flush(unsigned max_wait_ms) {
    std::unique_lock lk(m);
    if (!queue.empty()) ensure_writer();
    done.wait_for(lk, milliseconds(max_wait_ms), [&] { return (queue.empty() && in_flight == 0) || failed; });
    const bool drained = queue.empty() && in_flight == 0;
    const bool ok = drained && !lost;
    if (drained) lost = false;  // reported once
    return ok;
  }

  void close() {
    if (closed.load()) return;
    flush(1000);
    if (closed.exchange(true)) return;
    {
      std::lock_guard lk(m);
      stop = true;
      work.notify_all();
      if (!queue.empty()) {
        drops.fetch_add(queue.size(), std::memory_order_relaxed);
        queue.clear();
      }
    }
    if (writer.joinable()) {
      if (writer_pid == ::getpid()) {
        writer.join();
      } else {
        writer.detach();
      }
    }
    {
      std::lock_guard io(lookup_io);
      lookup_conn.reset();
    }
    std::lock_guard io(write_io);
    write_conn.reset();
  }

  // In a child of fork(), under m (taken before the fork), single-threaded: the parent's writer thread and
  // connections are not the child's. A connection no parent thread was using is closed; one in use is
  // abandoned. Queued entries are the parent's to write.
  void after_fork_child() {
    new (&work) std::condition_variable;
    new (&done) std::condition_variable;
    new (&writer) std::thread;  // the parent's thread handle, dropped without joining
    writer_pid = 0;
    queue.clear();
    in_flight = 0;
    lost = false;
    const auto release = [](std::mutex& io, std::unique_ptr<connection>& c) {
      if (io.try_lock()) {
        c.reset();
        io.unlock();
        return;
      }
      if (c) c->abandon();
      (void)c.release();  // its context is kept reachable in abandoned_contexts()
      new (&io) std::mutex;
    };
    release(lookup_io, lookup_conn);
    release(write_io, write_conn);
  }
};

namespace {

store_registry& registry() {
  static store_registry& r = []() -> store_registry& {
    auto* reg = new store_registry;  // never destroyed
    // The writer threads and connections a child inherits (see redis_store::after_fork_child): the child
    // starts its own writer on its first put, and opens its own connections.
    lifecycle::on_fork({[] {
                          store_registry& g = registry();
                          g.m.lock();
                          for (auto* s : g.stores) s->m.lock();
                        },
                        [] {
                          store_registry& g = registry();
                          for (auto* s : g.stores) s->m.unlock();
                          g.m.unlock();
                        },
                        [] {
                          store_registry& g = registry();
                          for (auto* s : g.stores) {
                            s->after_fork_child();
                            s->m.unlock();
                          }
                          g.m.unlock();
                        }});
    return *reg;
  }();
  return r;
}

}  // namespace

redis_store::redis_store(remote_options options) : impl_(std::make_unique<impl>(std::move(options))) {
  store_registry& r = registry();
  std::lock_guard lk(r.m);
  r.stores.insert(impl_.get());
}

redis_store::~redis_store() {
  close();
  store_registry& r = registry();
  std::lock_guard lk(r.m);
  r.stores.erase(impl_.get());
}

std::vector<stored_entry> redis_store::find(const stored_key& key) {
  try {
    return impl_->find(key);
  } catch (const std::exception& e) {  // out of memory: the launch goes on without the store
    impl_->fail(e.what());
    return {};
  }
}

void redis_store::put(const stored_entry& e) {
  try {
    impl_->put(e);
  } catch (const std::exception&) {
    impl_->drops.fetch_add(1, std::memory_order_relaxed);
  }
}

bool redis_store::flush(unsigned max_wait_ms) { return impl_->flush(max_wait_ms); }

remote_store_stats redis_store::statistics() const {
  const impl& s = *impl_;
  remote_store_stats out;
  out.enabled = !s.closed.load();
  out.dead = s.dead.load();
  out.lookups = s.lookups.load();
  out.hits = s.hits.load();
  out.refused = s.refused.load();
  out.loaded = s.loaded.load();
  out.writes = s.writes.load();
  out.already_stored = s.already.load();
  out.write_drops = s.drops.load();
  out.failures = s.failures.load();
  return out;
}

layer_stats redis_store::stats() const {
  const remote_store_stats r = statistics();
  layer_stats out;
  out.lookups = r.lookups;
  out.hits = r.hits;
  out.refused = r.refused;
  out.writes = r.writes;
  out.write_drops = r.write_drops + r.already_stored;
  out.failures = r.failures;
  out.dead = r.dead;
  return out;
}

void redis_store::close() { impl_->close(); }

const remote_url& redis_store::url() const noexcept { return impl_->opt.url; }

// ---- tools ------------------------------------------------------------------------------------------------

namespace {

constexpr std::size_t max_tool_problems = 1000;

std::string endpoint(const remote_url& url) { return url.host + ":" + std::to_string(url.port); }

// A connection for a tool's command, within the tool's bounds; nullptr with `failure` said when none.
std::unique_ptr<connection> open_for_tool(const remote_url& url, const remote_tool_limits& limits,
                                          std::string& failure) {
  std::string why;
  std::unique_ptr<connection> c = connection::open(url, limits.connect_timeout_ms, limits.op_timeout_ms, why);
  if (!c) failure = "cannot connect to " + endpoint(url) + ": " + why;
  return c;
}

}  // namespace

remote_listing list_remote_entries(const remote_url& url, const remote_tool_limits& limits,
                                   const std::string& prefix) {
  remote_listing out;
  const auto problem = [&](const std::string& key, std::string why) {
    ++out.refused;
    if (out.problems.size() < max_tool_problems) out.problems.push_back({key, std::move(why)});
  };
  try {
    std::string why;
    const std::unique_ptr<connection> c = open_for_tool(url, limits, out.failure);
    if (!c) return out;
    const auto deadline = steady::now() + milliseconds(limits.max_ms);
    std::size_t bytes = 0;
    std::string cursor = "0";
    std::set<std::string> seen;  // SCAN may return a key more than once
    std::vector<reply_ptr> replies;
    std::vector<std::string> keys;
    for (;;) {
      if (steady::now() >= deadline || out.keys >= limits.max_keys || bytes >= limits.max_bytes) {
        out.truncated = true;
        break;
      }
      if (!c->run({{"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"}}, replies, why) ||
          !scan_reply(*replies[0], cursor, keys, why)) {
        out.failure = why;
        break;
      }
      std::vector<command> reads;
      std::vector<std::string> names;
      for (auto& k : keys) {
        if (!seen.insert(k).second) continue;
        if (!is_remote_key(k)) {
          problem(k, "not a launchfit key of this format version");
          continue;
        }
        if (out.keys + names.size() >= limits.max_keys) {
          out.truncated = true;
          break;
        }
        reads.push_back(read_value(k));
        names.push_back(std::move(k));
      }
      if (!reads.empty()) {
        if (!c->run(reads, replies, why)) {
          out.failure = why;
          break;
        }
        for (std::size_t i = 0; i < names.size(); ++i) {
          const redisReply& r = *replies[i];
          if (r.type == REDIS_REPLY_NIL || (r.type == REDIS_REPLY_STRING && r.len == 0)) continue;  // expired
          if (r.type != REDIS_REPLY_STRING) {
            problem(names[i], "not a string value (" + connection::reply_text(r) + ")");
            continue;
          }
          bytes += r.len;
          if (r.len > remote_max_value_bytes) {
            problem(names[i], "a value larger than " + std::to_string(remote_max_value_bytes) + " bytes");
            continue;
          }
          std::optional<stored_entry> e = parse_remote_value(text_of(r), names[i], why);
          if (e) {
            out.entries.push_back(std::move(*e));
          } else {
            problem(names[i], why);
          }
        }
        out.keys += names.size();
      }
      if (out.truncated || cursor == "0") break;
    }
  } catch (const std::exception& e) {  // out of memory: what was read is kept
    out.failure = e.what();
  }
  return out;
}

remote_push_result push_remote_entries(const remote_url& url, const std::vector<stored_entry>& entries,
                                       std::uint64_t ttl_s, const remote_tool_limits& limits) {
  remote_push_result out;
  const auto problem = [&](std::string why) {
    if (out.problems.size() < max_tool_problems) out.problems.push_back(std::move(why));
  };
  try {
    std::string why;
    const std::unique_ptr<connection> c = open_for_tool(url, limits, out.failure);
    if (!c) return out;
    const auto deadline = steady::now() + milliseconds(limits.max_ms);
    constexpr std::size_t batch = 256;
    std::vector<reply_ptr> replies;
    for (std::size_t start = 0; start < entries.size(); start += batch) {
      if (steady::now() >= deadline) {
        out.failure = "stopped after " + std::to_string(limits.max_ms) + " ms with " +
                      std::to_string(entries.size() - start) + " entries left";
        break;
      }
      std::vector<command> cmds;
      for (std::size_t i = start; i < std::min(entries.size(), start + batch); ++i) {
        const stored_entry& e = entries[i];
        const std::string k = remote_key(e.key);
        const std::string label = entry_label(i, e.key);
        if (k.empty()) {
          ++out.refused;
          problem(label + ": names no device model (an older writer's entry serves its own GPU only)");
          continue;
        }
        std::string value = remote_value(e);
        if (value.size() > remote_max_value_bytes) {
          ++out.refused;
          problem(label + ": " + std::to_string(value.size()) + " bytes is above the limit of " +
                  std::to_string(remote_max_value_bytes));
          continue;
        }
        cmds.push_back(write_value(k, value, ttl_s));
      }
      if (cmds.empty()) continue;
      if (!c->run(cmds, replies, why)) {
        out.failure = why;
        break;
      }
      for (const auto& r : replies) {
        if (r->type == REDIS_REPLY_STATUS) {
          ++out.written;
        } else if (r->type == REDIS_REPLY_NIL) {
          ++out.present;
        } else {
          ++out.refused;
          problem("SET answered " + connection::reply_text(*r));
        }
      }
    }
  } catch (const std::exception& e) {
    out.failure = e.what();
  }
  return out;
}

// ---- the process's store ----------------------------------------------------------------------------------

namespace {

struct remote_config {
  std::mutex m;  // set/close and the first look at the environment; never taken by a lookup
  std::atomic<bool> env_checked{false};
  std::atomic<redis_store*> current{nullptr};
  std::vector<redis_store*> retired;  // closed, never destroyed: a pointer handed out stays valid
};

remote_config& config() {
  static remote_config& c = []() -> remote_config& {
    auto* made = new remote_config;  // never destroyed
    // A child of fork() must be able to configure its store though a thread of its parent was doing so.
    lifecycle::on_fork({nullptr, nullptr, [] { new (&config().m) std::mutex; }});
    return *made;
  }();
  return c;
}

void flush_at_exit() {
  if (redis_store* s = config().current.load()) s->flush(1000);
}

void register_exit_flush() {
  static std::once_flag once;  // a child of fork() inherits the registration with it
  std::call_once(once, [] { lifecycle::on_exit(flush_at_exit); });
}

// A store for `text` (from LAUNCHFIT_REMOTE or set_remote_store()), or nullptr after one warning.
redis_store* make_store(const std::string& text, bool from_env) {
  std::string why;
  std::optional<remote_url> url = parse_remote_url(text, why);
  if (!url) {
    const std::string shown = quote_text(text, 300, '\'');
    warn((from_env ? "LAUNCHFIT_REMOTE=" + shown : "set_remote_store(" + shown + ")") +
         ": not redis://host:port[/db] (" + why + "); the remote plan store stays off");
    return nullptr;
  }
  if (const std::string& failure = hiredis().failure; !failure.empty()) {
    warn("remote plan store " + escape_text(url->text, 300) + ": " + failure + "; the store stays off");
    return nullptr;
  }
  std::string ttl_warning;
  remote_options o;
  o.url = std::move(*url);
  o.ttl_s = remote_ttl_from_env(ttl_warning);
  if (!ttl_warning.empty()) warn(ttl_warning);
  o.flush_at_exit = true;
  return new redis_store(std::move(o));
}

// Under config().m.
void retire_current(remote_config& c) {
  if (redis_store* old = c.current.exchange(nullptr)) {
    old->close();
    c.retired.push_back(old);
  }
}

}  // namespace

plan_store_layer* remote_layer() noexcept {
  remote_config& c = config();
  if (!c.env_checked.load(std::memory_order_acquire)) {
    try {
      std::lock_guard lk(c.m);
      if (!c.env_checked.load(std::memory_order_relaxed)) {
        const char* env = std::getenv("LAUNCHFIT_REMOTE");
        if (env && *env) c.current.store(make_store(env, true), std::memory_order_release);
        c.env_checked.store(true, std::memory_order_release);
      }
    } catch (...) {  // out of memory: no remote store
      c.env_checked.store(true, std::memory_order_release);
    }
  }
  return c.current.load(std::memory_order_acquire);
}

}  // namespace launchfit::detail

namespace launchfit {

void set_remote_store(const std::string& url) {
  detail::remote_config& c = detail::config();
  std::lock_guard lk(c.m);
  c.env_checked.store(true, std::memory_order_release);
  detail::retire_current(c);
  c.current.store(detail::make_store(url, false), std::memory_order_release);
  detail::plan_inputs_changed("remote plan store");
}

void close_remote_store() {
  detail::remote_config& c = detail::config();
  std::lock_guard lk(c.m);
  c.env_checked.store(true, std::memory_order_release);
  const bool had = c.current.load() != nullptr;
  detail::retire_current(c);
  if (had) detail::plan_inputs_changed("remote plan store");
}

bool flush_remote_store(unsigned max_wait_ms) {
  detail::remote_layer();
  detail::redis_store* s = detail::config().current.load(std::memory_order_acquire);
  return s ? s->flush(max_wait_ms) : true;
}

remote_store_stats remote_store_statistics() {
  detail::remote_layer();
  detail::redis_store* s = detail::config().current.load(std::memory_order_acquire);
  return s ? s->statistics() : remote_store_stats{};
}

}  // namespace launchfit

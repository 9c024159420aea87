// SPDX-License-Identifier: MIT
// The Redis transport (redis_backend.hpp): the only file of launchfit that names hiredis.
//
// libhiredis is loaded at run time, as libcuda is (driver.cpp): neither the library nor its users link it,
// and a machine without it gets one warning. Its header is used for types only; the library loaded must be
// the ABI the header describes (hiredis 1.x changed redisContext, the reader and its callbacks), which is
// checked. hiredis is used for what it does well (formatting commands, the RESP state machine); the
// socket, the deadline and every allocation a reply causes are launchfit's:
//
// - the context is non-blocking, so no write or read waits past the exchange's deadline;
// - the bytes read (at most 16 KiB at a time) are fed to the reader, which is asked for replies after each
//   chunk, so one parse never covers more than one chunk;
// - the reader builds launchfit's own reply values through its object callbacks, which count elements and
//   bytes against the exchange's budget and refuse (return NULL: hiredis then fails the read) an array
//   that announces more elements than are left, or a string over its bound, before anything is allocated
//   for it. hiredis's own callbacks calloc the announced count: a SCAN reply announcing 2^31-1 elements
//   held a lookup 3.6 s, and 2.2 M small elements took 1.85 s and 181 MB.

#include "redis_backend.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "sigpipe_guard.hpp"

// LAUNCHFIT_NO_HIREDIS builds the library with the remote store always off.
#if __has_include(<hiredis/hiredis.h>) && !defined(LAUNCHFIT_NO_HIREDIS)
#include <hiredis/hiredis.h>
#define LAUNCHFIT_HIREDIS_HEADERS 1
#else
#define LAUNCHFIT_HIREDIS_HEADERS 0
#endif

namespace launchfit::detail::redis {

#if !LAUNCHFIT_HIREDIS_HEADERS

// Built without the headers: the store is never on, and says why.
struct connection::state {};
const std::string& unavailable() {
  static const std::string& why =
      *new std::string("this launchfit was built without the hiredis headers (libhiredis-dev)");
  return why;
}
connection::connection(std::unique_ptr<state> s) : s_(std::move(s)) {}
connection::~connection() = default;
std::unique_ptr<connection> connection::open(const std::string&, int, clock::time_point, std::string& why) {
  why = unavailable();
  return nullptr;
}
fault connection::exchange(const std::vector<command>&, std::vector<reply>&, clock::time_point,
                           const reply_bounds&, std::string& why) {
  why = unavailable();
  return fault::io;
}
void connection::abandon() noexcept {}
std::size_t connection::received() const noexcept { return 0; }

#else

namespace {

// ---- hiredis, loaded at run time --------------------------------------------------------------------------

struct hiredis_functions {
  redisContext* (*connect_nonblock)(const char*, int) = nullptr;
  int (*append_argv)(redisContext*, int, const char**, const std::size_t*) = nullptr;
  int (*buffer_write)(redisContext*, int*) = nullptr;
  int (*reader_feed)(redisReader*, const char*, std::size_t) = nullptr;
  int (*reader_get_reply)(redisReader*, void**) = nullptr;
  void (*free_context)(redisContext*) = nullptr;
  std::string failure;  // empty when usable
};

#define LAUNCHFIT_STRINGIFY2(x) #x
#define LAUNCHFIT_STRINGIFY(x) LAUNCHFIT_STRINGIFY2(x)

hiredis_functions load_hiredis() {
  hiredis_functions f;
  // hiredis 1.0 added redisConnectWithOptions and changed the layout of redisContext and the reader.
  const bool built_for_1x = HIREDIS_MAJOR >= 1;
  const auto abi_matches = [&](void* probe_scope) {
    return (dlsym(probe_scope, "redisConnectWithOptions") != nullptr) == built_for_1x;
  };
  const std::string built = LAUNCHFIT_STRINGIFY(HIREDIS_MAJOR) "." LAUNCHFIT_STRINGIFY(HIREDIS_MINOR);
  // A program that already has a hiredis loaded (linked, or dlopen'ed globally) resolves the symbols of any
  // other copy to its own: use that one when its ABI is ours, never load a second.
  void* scope = nullptr;
  if (dlsym(RTLD_DEFAULT, "redisConnectNonBlock")) {
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
  const auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::decay_t<decltype(fn)> >(dlsym(scope, name));
  };
  load(f.connect_nonblock, "redisConnectNonBlock");
  load(f.append_argv, "redisAppendCommandArgv");
  load(f.buffer_write, "redisBufferWrite");
  load(f.reader_feed, "redisReaderFeed");
  load(f.reader_get_reply, "redisReaderGetReply");
  load(f.free_context, "redisFree");
  if (!f.connect_nonblock || !f.append_argv || !f.buffer_write || !f.reader_feed || !f.reader_get_reply ||
      !f.free_context)
    f.failure = "libhiredis lacks a function launchfit uses";
  return f;
}

const hiredis_functions& hiredis() {
  static const hiredis_functions& f = *new hiredis_functions(load_hiredis());  // never destroyed
  return f;
}

// Contexts a forked child could not free (a thread of its parent was using them): kept reachable.
std::vector<redisContext*>& abandoned_contexts() {
  static auto& v = *new std::vector<redisContext*>;
  return v;
}

// ---- replies, built by the reader's callbacks within a budget ---------------------------------------------

// One exchange's budget, the reader's privdata while the exchange reads.
struct reply_budget {
  const reply_bounds* bounds = nullptr;
  clock::time_point deadline{};
  std::size_t elements = 0;  // announced: every root, and every array's count when it is announced
  std::size_t built = 0;     // callbacks run (the clock is read every 1,024)
  fault refused = fault::none;
  std::string why;

  bool refuse(fault f, std::string text) {
    if (refused == fault::none) {
      refused = f;
      why = std::move(text);
    }
    return false;
  }
  // Admits `more` announced elements; false (refused) past the bound or the deadline.
  bool admit(std::size_t more) {
    if (refused != fault::none) return false;
    if (more > bounds->max_elements - std::min(elements, bounds->max_elements))
      return refuse(fault::protocol,
                    "an answer of more than " + std::to_string(bounds->max_elements) + " elements");
    elements += more;
    if (++built % 1024 == 0 && clock::now() > deadline) return refuse(fault::timeout, "");
    return true;
  }
};

reply_budget& budget_of(const redisReadTask* t) { return *static_cast<reply_budget*>(t->privdata); }

// Where the task's value goes: its slot in the parent array (sized when the array was announced), or a new
// root, which the reader hands back (or frees through free_object on an error).
reply* place(const redisReadTask* t) {
  if (t->parent) return &static_cast<reply*>(t->parent->obj)->elements[static_cast<std::size_t>(t->idx)];
  return new reply;
}

// Admits the task's value (a root counts one element, an array the elements it announces), then places and
// fills it. nullptr (hiredis then fails the read) when the budget refuses it or memory runs out.
template <class Fill>
void* build(const redisReadTask* t, std::size_t announced, const Fill& fill) {
  reply_budget& b = budget_of(t);
  if (!b.admit(announced + (t->parent ? 0 : 1))) return nullptr;
  try {
    reply* r = place(t);
    fill(*r);
    return r;
  } catch (const std::bad_alloc&) {
    b.refuse(fault::protocol, "out of memory");
    return nullptr;
  }
}

// RESP3 types (hiredis 1.x knows them): never asked for.
void* unasked(const redisReadTask* t) {
  budget_of(t).refuse(fault::protocol, "a reply of a type launchfit does not ask for");
  return nullptr;
}

void* create_string(const redisReadTask* t, char* s, std::size_t len) {
  reply::kind k;
  switch (t->type) {
    case REDIS_REPLY_STRING:
      k = reply::kind::string;
      break;
    case REDIS_REPLY_STATUS:
      k = reply::kind::status;
      break;
    case REDIS_REPLY_ERROR:
      k = reply::kind::error;
      break;
    default:
      return unasked(t);
  }
  reply_budget& b = budget_of(t);
  if (len > b.bounds->max_string_bytes) {
    b.refuse(fault::protocol,
             "a string of more than " + std::to_string(b.bounds->max_string_bytes) + " bytes in an answer");
    return nullptr;
  }
  return build(t, 0, [&](reply& r) {
    r.type = k;
    r.text.assign(s, len);
  });
}

// hiredis 0.14 announces an int, 1.x a size_t.
#if HIREDIS_MAJOR >= 1
using element_count = std::size_t;
#else
using element_count = int;
#endif

void* create_array(const redisReadTask* t, element_count announced) {
  const long long n = static_cast<long long>(announced);
  if (t->type != REDIS_REPLY_ARRAY || n < 0) return unasked(t);
  // Counted, and refused past the budget, before the elements are allocated.
  return build(t, static_cast<std::size_t>(n), [&](reply& r) {
    r.type = reply::kind::array;
    r.elements.resize(static_cast<std::size_t>(n));
  });
}

void* create_integer(const redisReadTask* t, long long v) {
  return build(t, 0, [&](reply& r) {
    r.type = reply::kind::integer;
    r.integer = v;
  });
}

void* create_nil(const redisReadTask* t) {
  return build(t, 0, [](reply&) {});  // a reply is nil until set
}

#if HIREDIS_MAJOR >= 1
void* create_double(const redisReadTask* t, double, char*, std::size_t) { return unasked(t); }
void* create_bool(const redisReadTask* t, int) { return unasked(t); }
#endif

// hiredis frees only roots (a finished reply it was not asked for, or a partial one after an error).
void free_object(void* r) { delete static_cast<reply*>(r); }

// Plain data with no destructor: safe to reach from any thread at any time, exit included.
#if HIREDIS_MAJOR >= 1
redisReplyObjectFunctions reply_functions = {create_string, create_array, create_integer, create_double,
                                             create_nil,    create_bool,  free_object};
#else
redisReplyObjectFunctions reply_functions = {create_string, create_array, create_integer, create_nil,
                                             free_object};
#endif

// At most this much is read, fed to the reader and parsed at a time.
constexpr std::size_t read_chunk = 16 * 1024;

// Until fd is ready for `events`, by `deadline`. False when it is not (why set on a poll failure only).
bool wait_for(int fd, short events, clock::time_point deadline, std::string& why) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      why = std::string("poll failed (") + std::strerror(errno) + ")";
      return false;
    }
  }
}

std::string ms_text(clock::duration d) {
  return std::to_string(std::chrono::round<std::chrono::milliseconds>(d).count()) + " ms";
}

}  // namespace

struct connection::state {
  redisContext* ctx = nullptr;
  reply_budget budget;
  std::size_t received = 0;
};

const std::string& unavailable() { return hiredis().failure; }

connection::connection(std::unique_ptr<state> s) : s_(std::move(s)) {}

connection::~connection() {
  if (s_->ctx) hiredis().free_context(s_->ctx);
}

std::unique_ptr<connection> connection::open(const std::string& address, int port, clock::time_point deadline,
                                             std::string& why) {
  const hiredis_functions& api = hiredis();
  if (!api.failure.empty()) {
    why = api.failure;
    return nullptr;
  }
  const auto start = clock::now();
  sigpipe_guard guard;
  redisContext* c = api.connect_nonblock(address.c_str(), port);
  if (!c) {
    why = "out of memory";
    return nullptr;
  }
  auto s = std::make_unique<state>();
  s->ctx = c;
  std::unique_ptr<connection> out(new connection(std::move(s)));
  if (c->err) {
    why = c->errstr;
    return nullptr;
  }
  if (!wait_for(c->fd, POLLOUT, deadline, why)) {
    if (why.empty()) why = "no connection within " + ms_text(deadline - start);
    return nullptr;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    why = std::strerror(err);
    return nullptr;
  }
  // A child that execs must not keep the socket open.
  ::fcntl(c->fd, F_SETFD, ::fcntl(c->fd, F_GETFD) | FD_CLOEXEC);
  c->reader->fn = &reply_functions;
  return out;
}

fault connection::exchange(const std::vector<command>& commands, std::vector<reply>& replies,
                           clock::time_point deadline, const reply_bounds& bounds, std::string& why) {
  const hiredis_functions& api = hiredis();
  redisContext* c = s_->ctx;
  replies.clear();
  if (!c) {
    why = "the connection was given up";
    return fault::io;
  }
  const auto start = clock::now();
  const auto timed_out = [&] {
    why = "no answer within " + ms_text(deadline - start);
    return fault::timeout;
  };
  sigpipe_guard guard;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& cmd : commands) {
    argv.clear();
    lens.clear();
    for (const auto& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (api.append_argv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      why = c->errstr[0] ? c->errstr : "out of memory";
      return fault::io;
    }
  }
  for (int done = 0; !done;) {
    if (api.buffer_write(c, &done) != REDIS_OK) {
      why = c->errstr[0] ? c->errstr : "I/O error";
      return fault::io;
    }
    if (!done && !wait_for(c->fd, POLLOUT, deadline, why)) return why.empty() ? timed_out() : fault::io;
  }
  reply_budget& budget = s_->budget;
  budget = reply_budget{};
  budget.bounds = &bounds;
  budget.deadline = deadline;
  c->reader->privdata = &budget;
  // An incomplete item never needs more than the longest string, its header and one chunk.
  const std::size_t max_unparsed = bounds.max_string_bytes + 64 + read_chunk;
  std::size_t received = 0;
  char chunk[read_chunk];
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    for (;;) {
      void* r = nullptr;
      if (api.reader_get_reply(c->reader, &r) != REDIS_OK) {
        if (budget.refused == fault::timeout) return timed_out();
        why = budget.refused != fault::none ? budget.why : std::string(c->reader->errstr);
        return fault::protocol;
      }
      if (r) {
        const std::unique_ptr<reply> root(static_cast<reply*>(r));
        replies.push_back(std::move(*root));
        break;
      }
      if (clock::now() >= deadline) return timed_out();
      if (c->reader->len - c->reader->pos > max_unparsed) {
        why = "a string of more than " + std::to_string(bounds.max_string_bytes) + " bytes in an answer";
        return fault::protocol;
      }
      if (!wait_for(c->fd, POLLIN, deadline, why)) return why.empty() ? timed_out() : fault::io;
      const ssize_t n = ::recv(c->fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n == 0) {
        why = "the server closed the connection";
        return fault::io;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        why = std::strerror(errno);
        return fault::io;
      }
      received += static_cast<std::size_t>(n);
      s_->received += static_cast<std::size_t>(n);
      if (received > bounds.max_bytes) {
        why = "an answer larger than " + std::to_string(bounds.max_bytes >> 20) + " MiB";
        return fault::protocol;
      }
      if (api.reader_feed(c->reader, chunk, static_cast<std::size_t>(n)) != REDIS_OK) {
        why = c->reader->errstr;
        return fault::protocol;
      }
    }
  }
  return fault::none;
}

std::size_t connection::received() const noexcept { return s_->received; }

void connection::abandon() noexcept {
  redisContext* c = s_->ctx;
  if (!c) return;
  if (c->fd >= 0) ::close(c->fd);
  try {
    abandoned_contexts().push_back(c);
  } catch (...) {  // out of memory: leaked unreachable, never freed while a parent thread may use it
  }
  s_->ctx = nullptr;
}

#endif  // LAUNCHFIT_HIREDIS_HEADERS

}  // namespace launchfit::detail::redis

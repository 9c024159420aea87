// SPDX-License-Identifier: MIT
// The process's remote plan store (remote_store.hpp): configured once from LAUNCHFIT_REMOTE (read by the
// settings), replaced by
// set_remote_store(), closed by close_remote_store(); the public flush and statistics.

#include "remote_store.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launchfit/cache.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_inputs.hpp"
#include "settings.hpp"
#include "store/redis_backend.hpp"
#include "store/remote_layer.hpp"
#include "text.hpp"

namespace launchfit::detail {
namespace {

// What this file changes of every plan's inputs (plan_inputs.hpp), registered once.
const plan_input remote_store_input = register_plan_input("remote plan store");

void warn(const std::string& text) {
  try {
    logger()->warn("{}", text);
  } catch (...) {  // logging never ends a launch
  }
}

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

// The bounds of the stores made from now on (set_remote_bounds_for_tests); 0: the store's defaults.
std::atomic<unsigned> test_connect_ms{0}, test_op_ms{0};

// A store for `text` (from LAUNCHFIT_REMOTE or set_remote_store()), or nullptr after one warning.
redis_store* make_store(const std::string& text, bool from_env) {
  std::string why;
  std::optional<remote_url> url = parse_remote_url(text, why);
  if (!url) {
    const std::string shown = quote_text(redact_url(text), 300, '\'');
    warn((from_env ? "LAUNCHFIT_REMOTE=" + shown : "set_remote_store(" + shown + ")") +
         ": not redis://[user[:password]@]host:port[/db] (" + why + "); the remote plan store stays off");
    return nullptr;
  }
  // A password kept out of the URL: LAUNCHFIT_REDIS_PASSWORD, else LAUNCHFIT_REDIS_PASSWORD_FILE.
  if (url->password.empty()) url->password = current_settings().remote.password;
  if (const std::string& failure = redis::unavailable(); !failure.empty()) {
    warn("remote plan store " + escape_text(url->text, 300) + ": " + failure + "; the store stays off");
    return nullptr;
  }
  remote_options o;
  o.url = std::move(*url);
  o.ttl_s = current_settings().remote.ttl_s;  // LAUNCHFIT_REMOTE_TTL; a bad value warned of by the settings
  if (const unsigned ms = test_connect_ms.load()) o.connect_timeout_ms = ms;
  if (const unsigned ms = test_op_ms.load()) o.op_timeout_ms = ms;
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

void set_remote_bounds_for_tests(unsigned connect_ms, unsigned op_ms) noexcept {
  test_connect_ms.store(connect_ms);
  test_op_ms.store(op_ms);
}

plan_store_layer* remote_layer() noexcept {
  remote_config& c = config();
  if (!c.env_checked.load(std::memory_order_acquire)) {
    try {
      std::lock_guard lk(c.m);
      if (!c.env_checked.load(std::memory_order_relaxed)) {
        const std::string& env = current_settings().remote.url;
        if (!env.empty()) c.current.store(make_store(env, true), std::memory_order_release);
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
  detail::plan_input_changed(detail::remote_store_input);
}

void close_remote_store() {
  detail::remote_config& c = detail::config();
  std::lock_guard lk(c.m);
  c.env_checked.store(true, std::memory_order_release);
  const bool had = c.current.load() != nullptr;
  detail::retire_current(c);
  if (had) detail::plan_input_changed(detail::remote_store_input);
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

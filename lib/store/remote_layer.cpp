// SPDX-License-Identifier: MIT
// The remote plan store as a layer (remote_layer.hpp): lookups, bulk reads of a device model, the writer.
//
// Three connections per store: one for lookups (the caller's thread, on a miss), one for the writer, so a
// lookup never waits behind a batch of writes, and one for the tuning leases (lease.hpp). A lookup waits for
// the lookup connection at most until its own deadline (a timed mutex), never behind another thread's slow
// lookup for longer; a lease likewise for the leases'.

#include "remote_layer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "../background.hpp"
#include "../deadline_lock.hpp"
#include "../lifecycle.hpp"
#include "../log_internal.hpp"
#include "../plan_match.hpp"
#include "../text.hpp"
#include "device_match.hpp"
#include "future_stamps.hpp"
#include "lease.hpp"
#include "redis_ops.hpp"
#include "slow_store.hpp"
#include "store_memory.hpp"

namespace launchfit::detail {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// An exchange of the layer: at most 64 Ki elements and 8 MiB, no string above a value's bound + 1 byte
// (GETRANGE reads one byte more than a value may hold, so that an oversized value is recognised).
constexpr redis::reply_bounds layer_bounds{std::size_t(64) * 1024, remote_max_value_bytes + 1,
                                           std::size_t(8) << 20};

void warn(const std::string& text) {
  try {
    logger()->warn("{}", text);
  } catch (...) {  // logging never ends a launch
  }
}

// Per process, so that a child of fork() can make every store its own (connections, writer thread, locks).
struct store_registry {
  std::mutex m;
  std::set<redis_store::impl*> stores;
};
store_registry& registry();

// How long a normal exit waits for a store's queue (background.hpp drains the stores after the plan file).
constexpr milliseconds exit_wait{1000};
// Entries written per run of the writer (one pipeline of SET NX, then the compare-and-set rounds).
constexpr std::size_t batch_size = 64;
// The most one run of the writer (a batch with its compare-and-set rounds, or a refresh of lifetimes) takes,
// connecting included: a peer that answers each exchange just within its own bound cannot stretch a batch of
// up to 33 exchanges (and the exit, or the tuning launch that publishes, waiting for it) to seconds. Past it
// the store counts as failed, as a lookup past its bound does.
constexpr milliseconds writer_run_limit = exit_wait;

// Why the lookup on this thread found nothing, for get(): the failure that killed the store, or a lookup
// that gave up waiting for another thread's (a timeout of its own bound). Plain data: no destructor.
thread_local store_fault this_lookup_failed = store_fault::none;

}  // namespace

// The store's writer is a task of the background queue (background.hpp): it runs on the one background
// thread, or on a flushing caller's thread, one batch per run; the queue drains it at normal exit after the
// plan file. Lookups run on the caller's thread.
struct redis_store::impl final : public background::task {
  explicit impl(remote_options o)
      : opt(std::move(o)), shown_url(escape_text(opt.url.text, 300)), origin(remote_origin(opt.url)) {
    queued = background::add(*this, background::exit_order::remote_store);
  }

  remote_options opt;
  std::string shown_url;
  std::string origin;  // what entries read here say they came from: the URL without user or password
  std::atomic<bool> dead{false}, closed{false}, refusal_warned{false};

  std::atomic<std::uint64_t> lookups{0}, hits{0}, refused{0}, loaded{0}, writes{0}, already{0}, replaced{0},
      superseded{0}, drops{0}, failures{0}, busy{0}, ttl_refreshes{0};

  bool queued = false;   // a task of the background queue (false: its table was full, nothing is written)
  mutable std::mutex m;  // everything below but the connections; never held across I/O, logging or wake()
  std::condition_variable done;  // a batch ended, or the store failed
  std::deque<stored_entry> queue;
  // Keys whose time to live a lookup's read asks the writer to refresh, and when each was last asked (at
  // most once per key per refresh_every; at most refresh_keys_max keys remembered).
  std::vector<std::string> touches;
  std::map<std::string, steady::time_point> touched_at;
  std::size_t in_flight = 0;
  bool lost = false;    // an entry put since the last flush was not written
  bool failed = false;  // dead, and the failure logged

  store_memory memory;  // what lookups found and this process wrote

  deadline_lock lookup_io;  // held across the lookup connection's I/O
  std::unique_ptr<redis::connection> lookup_conn;
  // The tuning leases' connection (take, release, poll): a lease never waits behind a lookup's read of a device
  // model, nor a lookup behind the background queue's polls. Held to the lookups' bounds and slow-store rule.
  deadline_lock lease_io;
  std::unique_ptr<redis::connection> lease_conn;
  // The leases' own count of slow answers: fast polls never reset the lookups'.
  slow_store_rule lease_slowness{milliseconds(opt.op_timeout_ms)};
  slow_store_rule slowness{milliseconds(opt.op_timeout_ms)};
  std::mutex write_io;  // held across the writer connection's I/O
  std::unique_ptr<redis::connection> write_conn;

  // A failed operation: the store is dead for the process; the first failure warns. Its kind is what the
  // lookup on this thread answers the chain (get()).
  void fail(const std::string& why, store_fault kind) {
    failures.fetch_add(1, std::memory_order_relaxed);
    this_lookup_failed = kind;
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

  // The time a lookup still has for an exchange: none when less than half the operation bound is left (the
  // rest went to waiting for another thread's lookup), so that no exchange is cut for a reason not the
  // store's.
  bool time_for_exchange(steady::time_point deadline) const {
    return deadline - steady::now() >= milliseconds(opt.op_timeout_ms) / 2;
  }

  // Under the connection's lock: one exchange of a lookup or a lease on `conn`, connecting first when needed,
  // within the caller's deadline, under the slow-store rule (`budgeted`: see slow_store.hpp). A failure drops
  // the connection; the caller kills the store.
  store_failure exchange_on(std::unique_ptr<redis::connection>& conn, slow_store_rule& rule,
                            const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies,
                            steady::time_point deadline, bool budgeted) {
    store_failure f;
    if (!conn) {
      conn = connect_store(opt.url, std::min(steady::now() + milliseconds(opt.connect_timeout_ms), deadline),
                           deadline, f);
      if (!conn) return f;
    }
    const auto start = steady::now();
    std::string why;
    const redis::fault r =
        conn->exchange(cmds, replies, std::min(start + milliseconds(opt.op_timeout_ms), deadline), layer_bounds, why);
    if (r != redis::fault::none) {
      conn.reset();
      return {fault_of(r), why};
    }
    const auto end = steady::now();
    if (std::string slow = rule.record(end - start, end, budgeted); !slow.empty()) {
      conn.reset();
      return {store_fault::timeout, "answers too slowly (" + slow + ")"};
    }
    return f;
  }
  // Under lookup_io: one exchange of a lookup.
  store_failure lookup_exchange(const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies,
                                steady::time_point deadline) {
    return exchange_on(lookup_conn, slowness, cmds, replies, deadline, true);
  }

  // One exchange of a lease operation (lease.hpp's commands) on the leases' connection, as a lookup's: within
  // one operation bound, under the slow-store rule; a failed exchange drops the store as a lookup's does. A
  // store dead or closed answers at once. Another lease operation holding the connection past the bound (one
  // exchange of a few keys each: rare) fails this one alone, as `busy`, never the store. A poll of the
  // background queue (`budgeted` false), which no launching thread waits for, is held to the rule's answers
  // in a row only: polled every 50 ms, a store a few milliseconds away would spend the lookups' budget on polls.
  store_failure lease_exchange(const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies,
                               bool budgeted = true) {
    const store_failure off{store_fault::refused, "the store is not in use"};
    if (closed.load() || dead.load()) return off;
    const auto deadline = steady::now() + milliseconds(opt.op_timeout_ms);
    std::unique_lock io(lease_io, std::defer_lock);
    if (!io.try_lock_until(deadline) || !time_for_exchange(deadline)) {
      busy.fetch_add(1, std::memory_order_relaxed);
      return {store_fault::bound, "another lease operation held the connection"};
    }
    if (closed.load() || dead.load()) return off;
    store_failure f = exchange_on(lease_conn, lease_slowness, cmds, replies, deadline, budgeted);
    if (f) fail(f.text, f.kind);
    return f;
  }

  // A value read under `key` into the model's slots. False when the reply kills the store.
  bool take_value(const std::string& prefix, const std::string& key, const redis::reply& r,
                  std::size_t& bytes) {
    std::optional<stored_entry> entry;
    if (r.type == redis::reply::kind::string) {
      bytes += r.text.size();
      if (r.text.size() > remote_max_value_bytes) {
        fail(
            "the value under " + key + " is larger than " + std::to_string(remote_max_value_bytes) + " bytes",
            store_fault::protocol);
        return false;
      }
      if (!r.text.empty()) {
        std::string why, cleared;
        entry = parse_remote_value(r.text, key, why, &cleared);
        if (entry) {
          entry->origin = origin;
          loaded.fetch_add(1, std::memory_order_relaxed);
          if (!cleared.empty())
            note_future_stamps(stamp_reader::remote, "remote plan store " + opt.url.text + " key " + key, 1,
                               cleared);
        } else {
          refuse(key, why);
        }
      }
    } else if (r.type != redis::reply::kind::nil) {  // WRONGTYPE and other errors, or not a string at all
      fail("reading " + key + " answered " + redis::describe(r), store_fault::protocol);
      return false;
    }
    memory.found(prefix, key, std::move(entry));
    return true;
  }

  // Under lookup_io: the model's entries, within the lookup's deadline and the bulk bounds.
  void read_model(const std::string& prefix, steady::time_point deadline) {
    std::size_t keys = 0, bytes = 0;
    const auto wanted = [&](std::string_view k) {
      if (keys >= opt.bulk_max_keys || k.compare(0, prefix.size(), prefix) != 0 || !is_remote_key(k))
        return false;  // not ours, or the bound
      if (memory.holds(prefix, std::string(k))) return false;
      ++keys;
      return true;
    };
    const auto take = [&](const std::string& k, const redis::reply& r) {
      return take_value(prefix, k, r, bytes);
    };
    const auto more = [&] {
      return keys < opt.bulk_max_keys && bytes < opt.bulk_max_bytes && time_for_exchange(deadline);
    };
    const auto exchange = [&](const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
      return lookup_exchange(cmds, replies, deadline);
    };
    store_failure f;
    const bool complete = scan_values(exchange, prefix, 512, wanted, take, more, f);
    if (f) fail(f.text, f.kind);
    if (dead.load()) return;
    memory.read_ended(prefix, complete, steady::now());
  }

  // Under lookup_io: one key, for a model read only in part.
  void read_key(const std::string& prefix, const std::string& key, steady::time_point deadline) {
    if (!time_for_exchange(deadline)) {
      busy.fetch_add(1, std::memory_order_relaxed);
      this_lookup_failed = store_fault::timeout;
      return;
    }
    std::vector<redis::reply> replies;
    if (store_failure f = lookup_exchange({read_value_command(key)}, replies, deadline)) {
      fail(f.text, f.kind);
      return;
    }
    std::size_t bytes = 0;
    take_value(prefix, key, replies[0], bytes);
  }

  std::vector<stored_entry> answer(const stored_key& key, const std::string& prefix) {
    std::vector<stored_entry> out = memory.entries_for(key, prefix);
    hits.fetch_add(out.size(), std::memory_order_relaxed);
    if (!out.empty()) touch(out);
    return out;
  }

  // A read entry lives on: its key's time to live is refreshed by the writer, at most once per key per
  // refresh_every in this process. The lookup only queues (under m, no I/O).
  void touch(const std::vector<stored_entry>& read) {
    bool wake = false;
    {
      const auto now = steady::now();
      std::lock_guard lk(m);
      if (!queued || closed.load() || dead.load()) return;
      for (const stored_entry& e : read) {
        std::string k = remote_key(e.key);
        if (k.empty()) continue;
        const auto at = touched_at.find(k);
        if (at != touched_at.end() && now - at->second < opt.refresh_every) continue;
        if (touches.size() >= opt.queue_max) break;  // refreshed on a later read
        if (at != touched_at.end()) {
          at->second = now;
        } else {
          if (touched_at.size() >= opt.refresh_keys_max) {
            // Forget the keys whose interval passed; a full map of recent keys refreshes nothing more.
            for (auto it = touched_at.begin(); it != touched_at.end();)
              it = now - it->second >= opt.refresh_every ? touched_at.erase(it) : std::next(it);
            if (touched_at.size() >= opt.refresh_keys_max) break;
          }
          touched_at.emplace(k, now);
        }
        touches.push_back(std::move(k));
        wake = true;
      }
    }
    if (wake) background::wake(*this);  // after m is released (background.cpp's lock rule)
  }

  std::vector<stored_entry> find(const stored_key& key) {
    if (closed.load(std::memory_order_acquire) || dead.load(std::memory_order_acquire)) return {};
    const std::string rkey = remote_key(key);
    if (rkey.empty()) return {};
    lookups.fetch_add(1, std::memory_order_relaxed);
    const std::string prefix = rkey.substr(0, rkey.size() - 16);
    if (!memory.answers(prefix, rkey, steady::now())) {
      const auto deadline = steady::now() + milliseconds(opt.op_timeout_ms);
      std::unique_lock io(lookup_io, std::defer_lock);
      if (!io.try_lock_until(deadline)) {  // another thread's lookup holds the connection: fail open
        busy.fetch_add(1, std::memory_order_relaxed);
        this_lookup_failed = store_fault::timeout;
        return answer(key, prefix);
      }
      if (closed.load() || dead.load()) return {};
      if (!memory.answers(prefix, rkey, steady::now())) {
        if (!memory.read(prefix)) {
          if (!time_for_exchange(deadline)) {
            busy.fetch_add(1, std::memory_order_relaxed);
            this_lookup_failed = store_fault::timeout;
            return answer(key, prefix);
          }
          read_model(prefix, deadline);
        }
        if (dead.load()) return {};
        if (!memory.answers(prefix, rkey, steady::now())) read_key(prefix, rkey, deadline);
        if (dead.load()) return {};
      }
    }
    return answer(key, prefix);
  }

  void put(const stored_entry& e) {
    const std::string rkey = remote_key(e.key);
    {
      std::lock_guard lk(m);
      if (!queued || closed.load() || dead.load() || rkey.empty() || queue.size() >= opt.queue_max) {
        drops.fetch_add(1, std::memory_order_relaxed);
        lost = true;
        return;
      }
      queue.push_back(e);
    }
    stored_entry mine = e;
    mine.plan.match = plan_match::remote;
    mine.origin = origin;
    memory.wrote(rkey.substr(0, rkey.size() - 16), rkey, std::move(mine));
    background::wake(*this);  // after m is released (background.cpp's lock rule)
  }

  // background::task: one batch written. Never throws.
  background::clock::time_point run() noexcept override {
    std::vector<stored_entry> batch;
    std::vector<std::string> refresh;
    try {
      std::lock_guard lk(m);
      if (closed.load() || dead.load()) return background::never;
      batch.reserve(std::min(queue.size(), batch_size));
      while (!queue.empty() && batch.size() < batch_size) {
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      refresh.swap(touches);
      in_flight = batch.size() + refresh.size();
    } catch (const std::bad_alloc&) {  // the batch is lost, counted
      drops.fetch_add(batch.size(), std::memory_order_relaxed);
      batch.clear();
    }
    if (!batch.empty()) write_batch(batch);
    if (!refresh.empty()) refresh_batch(refresh);
    std::lock_guard lk(m);
    in_flight = 0;
    done.notify_all();
    return (queue.empty() && touches.empty()) || failed ? background::never
                                                        : background::clock::time_point::min();
  }
  bool has_work() const noexcept override {
    std::lock_guard lk(m);
    return !failed && (!queue.empty() || !touches.empty() || in_flight > 0);
  }
  // Normal exit: what is queued is written within exit_wait (a store that hangs costs no more).
  void drain_at_exit() noexcept override { flush(static_cast<unsigned>(exit_wait.count())); }
  const char* name() const noexcept override { return "remote store"; }

  // Under write_io: one exchange of the writer, connecting first when needed, within its own bounds and by
  // `until` (the end of the writer's run: writer_run_limit).
  store_failure write_exchange(const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies,
                               steady::time_point until) {
    store_failure f;
    const auto start = steady::now();
    const store_failure over_limit{store_fault::timeout, "a run of the writer took more than " +
                                                             std::to_string(writer_run_limit.count()) +
                                                             " ms (the store answers slowly)"};
    if (start >= until) return over_limit;
    if (!write_conn) {
      write_conn = connect_store(opt.url, std::min(until, start + milliseconds(opt.connect_timeout_ms)),
                                 std::min(until, start + milliseconds(opt.connect_timeout_ms + opt.op_timeout_ms)),
                                 f);
      if (!write_conn) return f;
    }
    std::string why;
    const auto own_bound = steady::now() + milliseconds(opt.op_timeout_ms);
    const redis::fault r = write_conn->exchange(cmds, replies, std::min(until, own_bound), layer_bounds, why);
    if (r != redis::fault::none) {
      write_conn.reset();
      f = r == redis::fault::timeout && until < own_bound ? over_limit : store_failure{fault_of(r), why};
    }
    return f;
  }

  // The time to live of keys lookups read, refreshed (refresh_ttls()).
  void refresh_batch(const std::vector<std::string>& keys) noexcept {
    store_failure failure;
    try {
      std::lock_guard io(write_io);
      if (dead.load()) return;
      std::size_t refreshed = 0;
      const auto until = steady::now() + writer_run_limit;
      failure = refresh_ttls(
          [&](const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
            return write_exchange(cmds, replies, until);
          },
          keys, opt.ttl_s, refreshed);
      ttl_refreshes.fetch_add(refreshed, std::memory_order_relaxed);
    } catch (const std::exception&) {  // out of memory: refreshed on a later read
    }
    if (failure) fail(failure.text, failure.kind);
  }

  void write_batch(const std::vector<stored_entry>& batch) noexcept {
    std::size_t unwritten = batch.size();
    store_failure failure;
    try {
      std::lock_guard io(write_io);
      if (!dead.load()) {
        std::vector<key_value> kvs;
        for (const auto& e : batch) kvs.push_back({remote_key(e.key), e});
        const auto until = steady::now() + writer_run_limit;
        const auto exchange = [&](const std::vector<redis::command>& cmds,
                                  std::vector<redis::reply>& replies) {
          return write_exchange(cmds, replies, until);
        };
        write_counts counts;
        if (!kvs.empty()) failure = write_entries(exchange, kvs, opt.ttl_s, counts);
        writes.fetch_add(counts.written, std::memory_order_relaxed);
        already.fetch_add(counts.present, std::memory_order_relaxed);
        replaced.fetch_add(counts.replaced, std::memory_order_relaxed);
        superseded.fetch_add(counts.superseded, std::memory_order_relaxed);
        unwritten -= counts.written + counts.present + counts.replaced + counts.superseded;
      }
    } catch (const std::exception&) {  // out of memory: the rest of the batch is counted as dropped
    }
    // Counted before the failure is: a flush that returns because of it sees the whole batch accounted for.
    if (unwritten > 0) {
      drops.fetch_add(unwritten, std::memory_order_relaxed);
      std::lock_guard lk(m);
      lost = true;
    }
    if (failure) fail(failure.text, failure.kind);
  }

  // Waits until the queue is written (by running the writer on this thread when the background thread is
  // busy with another task) or the store failed, at most max_wait_ms.
  bool flush(unsigned max_wait_ms) noexcept {
    const auto deadline = steady::now() + milliseconds(max_wait_ms);
    std::unique_lock lk(m);
    const auto settled = [&] { return (queue.empty() && touches.empty() && in_flight == 0) || failed; };
    while (!settled() && steady::now() < deadline) {
      const std::size_t before = queue.size();
      lk.unlock();
      const bool ran = queued && !background::on_background_thread() && background::run_here(*this, deadline);
      lk.lock();
      if (!ran || (queue.size() >= before && !settled())) {  // from a task's run, or no progress: wait
        done.wait_until(lk, deadline, settled);
        break;
      }
    }
    const bool drained = queue.empty() && touches.empty() && in_flight == 0;
    const bool ok = drained && !lost;
    if (drained) lost = false;  // reported once
    return ok;
  }

  void close() {
    if (closed.load()) return;
    flush(static_cast<unsigned>(exit_wait.count()));
    if (closed.exchange(true)) return;
    {
      std::lock_guard lk(m);
      drops.fetch_add(queue.size(), std::memory_order_relaxed);
      queue.clear();
      touches.clear();
      done.notify_all();
    }
    if (queued) background::remove(*this);  // a run in progress ends first; never run again
    {
      std::lock_guard io(lookup_io);
      lookup_conn.reset();
    }
    {
      std::lock_guard io(lease_io);
      lease_conn.reset();
    }
    std::lock_guard io(write_io);
    write_conn.reset();
  }

  // In a child of fork(), under m (taken before the fork), single-threaded. The background queue runs this
  // store's writer again in the child (a run the parent had in progress is gone); what the parent queued is
  // the parent's to write. A connection no parent thread was using is closed; one in use is abandoned.
  void after_fork_child() {
    new (&done) std::condition_variable;
    queue.clear();
    touches.clear();
    in_flight = 0;
    lost = false;
    const auto release = [](auto& io, std::unique_ptr<redis::connection>& c) {
      using mutex_type = std::remove_reference_t<decltype(io)>;
      if (io.try_lock()) {
        c.reset();
        io.unlock();
        return;
      }
      if (c) c->abandon();
      c.reset();  // its context is kept reachable by the transport, never freed
      new (&io) mutex_type;
    };
    release(lookup_io, lookup_conn);
    release(lease_io, lease_conn);
    release(write_io, write_conn);
    new (&slowness) slow_store_rule(milliseconds(opt.op_timeout_ms));
    new (&lease_slowness) slow_store_rule(milliseconds(opt.op_timeout_ms));
  }
};

namespace {

store_registry& registry() {
  static store_registry& r = []() -> store_registry& {
    auto* reg = new store_registry;  // never destroyed
    // The locks and connections a child inherits (see redis_store::impl::after_fork_child): the child opens
    // its own connections, and the background queue runs its writer.
    lifecycle::on_fork({[] {
                          store_registry& g = registry();
                          g.m.lock();
                          for (auto* s : g.stores) {
                            s->m.lock();
                            s->memory.lock_for_fork();
                          }
                        },
                        [] {
                          store_registry& g = registry();
                          for (auto* s : g.stores) {
                            s->memory.unlock_after_fork();
                            s->m.unlock();
                          }
                          g.m.unlock();
                        },
                        [] {
                          store_registry& g = registry();
                          for (auto* s : g.stores) {
                            s->after_fork_child();
                            s->memory.unlock_after_fork();
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
    impl_->fail(e.what(), store_fault::io);
    return {};
  }
}

layer_answer redis_store::get(const stored_key& key) {
  this_lookup_failed = store_fault::none;
  layer_answer a{find(key), layer_failure::none};
  if (a.entries.empty()) {
    a.failure = layer_failure_of(this_lookup_failed);
    if (a.failure == layer_failure::none && (impl_->dead.load() || impl_->closed.load()))
      a.failure = layer_failure::refused;
  }
  return a;
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
  out.replaced = s.replaced.load();
  out.superseded = s.superseded.load();
  out.busy = s.busy.load();
  out.ttl_refreshes = s.ttl_refreshes.load();
  return out;
}

layer_stats redis_store::stats() const {
  const remote_store_stats r = statistics();
  layer_stats out;
  out.lookups = r.lookups;
  out.hits = r.hits;
  out.refused = r.refused;
  out.writes = r.writes + r.replaced + r.superseded;
  out.write_drops = r.write_drops + r.already_stored;
  out.failures = r.failures;
  out.dead = r.dead;
  out.future_stamps = future_stamps_read(stamp_reader::remote);
  return out;
}

void redis_store::close() { impl_->close(); }

const remote_url& redis_store::url() const noexcept { return impl_->opt.url; }

// ---- leases (lease.hpp's commands on the lookup connection) -----------------------------------------------

namespace {

// The exchange lease.hpp's commands go through: the store's leases' connection (impl::lease_exchange).
redis_exchange lease_exchange_of(redis_store::impl& s, bool budgeted) {
  return [&s, budgeted](const std::vector<redis::command>& cmds, std::vector<redis::reply>& replies) {
    return s.lease_exchange(cmds, replies, budgeted);
  };
}

}  // namespace

// A store dead for the process, or closed (close_remote_store(), set_remote_store()), takes no leases and
// answers no polls: every process then decides alone, as without a store.
lease_answer redis_store::take_lease(const std::string& lease_key, const std::string& owner,
                                     std::uint64_t ttl_ms) {
  if (impl_->dead.load() || impl_->closed.load()) return lease_failed(layer_failure::refused);
  return redis_take_lease(lease_exchange_of(*impl_, true), lease_key, owner, ttl_ms);
}

lease_answer redis_store::release_lease(const std::string& lease_key, const std::string& owner) {
  if (impl_->dead.load() || impl_->closed.load()) return lease_failed(layer_failure::refused);
  return redis_release_lease(lease_exchange_of(*impl_, true), lease_key, owner);
}

std::vector<lease_poll> redis_store::poll_leases(
    const std::vector<std::pair<std::string, stored_key>>& items) {
  if (impl_->dead.load() || impl_->closed.load())
    return std::vector<lease_poll>(items.size(), lease_poll{std::nullopt, false, layer_failure::refused});
  // Budgeted where a launching thread polls (adopt_if_published() on a tuning miss), not on the background queue.
  return redis_poll_leases(lease_exchange_of(*impl_, !background::on_background_thread()), items);
}

}  // namespace launchfit::detail

// SPDX-License-Identifier: MIT
// Listeners on new plans, and the NVTX ranges around launches.

#include "observe_internal.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/log.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_description.hpp"
#include "settings.hpp"
#include "text.hpp"

// NVTX_DISABLE is NVTX's own switch, honoured as CUB honours it: a build that defines it (for the whole
// program, e.g. CXXFLAGS=-DNVTX_DISABLE) gets no ranges from launchfit either, as with -DLAUNCHFIT_NVTX=OFF.
#if defined(NVTX_DISABLE) && !defined(LAUNCHFIT_NO_NVTX)
#define LAUNCHFIT_NO_NVTX
#endif

#ifndef LAUNCHFIT_NO_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace launchfit {
namespace detail {
namespace {

// One registered listener. A snapshot taken before its removal may still hold it: `removed`, set under
// `m`, stops every call that has not started, and remove_plan_listener() waits for the calls in progress on
// other threads, so that no call happens once it returns.
struct listener_entry {
  std::uint64_t id = 0;
  plan_listener fn;
  std::mutex m;
  std::condition_variable idle;
  bool removed = false;
  int running = 0;                    // calls in progress, on any thread
  std::atomic<bool> reported{false};  // its first exception was reported: each throwing listener once
};

// The listener calls in progress on this thread (a listener may notify, or remove itself, from inside).
thread_local std::vector<const listener_entry*> calling_here;

using listener_list = std::vector<std::shared_ptr<listener_entry>>;

struct listeners {
  std::mutex m;
  std::uint64_t next_id = 1;
  // Replaced, never changed in place: a caller iterates its own snapshot with no lock held.
  std::shared_ptr<const listener_list> list = std::make_shared<listener_list>();
  std::atomic<bool> any{false};
};

// Fork: the list's lock is taken, then the lock of each listener on it. Both are leaves: nothing else is locked
// under either, no listener is called under either, and no thread holding a listener's lock waits for the
// list's. In the child, where the threads that were calling listeners are gone, the locks are made anew and a
// listener counts as running only the calls of the forking thread: a child removing a listener that another
// thread was inside at the fork would otherwise wait for ever for that call to end.
void lock_listeners_for_fork();
void unlock_listeners_after_fork();
void remake_listeners_in_child();

listeners& the_listeners() {
  static listeners& l = *[] {
    auto* made = new listeners();  // never destroyed, as every launchfit singleton
    lifecycle::on_fork_leaf({lock_listeners_for_fork, unlock_listeners_after_fork, remake_listeners_in_child});
    return made;
  }();
  return l;
}
// Made at load time, before any thread: a fork never meets its initialiser (and hook registration) in progress.
const bool listeners_made = (the_listeners(), true);

void lock_listeners_for_fork() {
  listeners& l = the_listeners();
  l.m.lock();
  for (const auto& entry : *l.list) entry->m.lock();
}

void unlock_listeners_after_fork() {
  listeners& l = the_listeners();
  for (const auto& entry : *l.list) entry->m.unlock();
  l.m.unlock();
}

void remake_listeners_in_child() {
  listeners& l = the_listeners();
  for (const auto& entry : *l.list) {
    lifecycle::abandoned_in_child(&entry->m);
    new (&entry->m) std::mutex;
    new (&entry->idle) std::condition_variable;  // a remove_plan_listener() of a thread that is gone waited on it
    entry->running = static_cast<int>(std::count(calling_here.begin(), calling_here.end(), entry.get()));
  }
  lifecycle::abandoned_in_child(&l.m);
  new (&l.m) std::mutex;
}

#ifndef LAUNCHFIT_NO_NVTX
// LAUNCHFIT_NVTX, until set_nvtx() (a refused word is reported with the other settings' warnings).
std::atomic<bool>& nvtx_flag() {
  static std::atomic<bool>& on = *new std::atomic<bool>(current_settings().nvtx);
  return on;
}

// NVTX reaches a tool only through an injection library named by NVTX_INJECTION64_PATH (Nsight Systems and
// Nsight Compute set it when they start the program): without one, no range can be seen, so none is made and
// a plan's name is not even built (a miss stays as cheap as without NVTX).
bool nvtx_tool_present() {
  static const bool present = current_settings().nvtx_tool_attached;
  return present;
}

nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("launchfit");
  return d;
}
#endif

}  // namespace

bool listeners_active() noexcept { return the_listeners().any.load(std::memory_order_acquire); }

// Says once per listener that it threw, with what it threw.
void report_throw(listener_entry& entry, const plan_event& ev, const char* what) noexcept {
  if (entry.reported.exchange(true)) return;
  try {
    logger()->warn("plan listener {} threw for kernel {}: {}; the launch goes on (reported once per listener)",
                   entry.id, escape_text(ev.kernel, log_field_cap), escape_text(what, log_field_cap));
  } catch (...) {
  }
}

void notify_plan(const plan_event& ev) noexcept {
  listeners& l = the_listeners();
  if (!l.any.load(std::memory_order_acquire)) return;
  std::shared_ptr<const listener_list> snapshot;
  {
    std::lock_guard<std::mutex> lock(l.m);
    snapshot = l.list;
  }
  for (const auto& entry : *snapshot) {
    {
      std::lock_guard<std::mutex> lock(entry->m);
      if (entry->removed) continue;
      ++entry->running;
    }
    try {
      calling_here.push_back(entry.get());
    } catch (...) {  // no room to note the call: it is not made
      std::lock_guard<std::mutex> lock(entry->m);
      --entry->running;
      entry->idle.notify_all();
      continue;
    }
    try {
      entry->fn(ev);
    } catch (const std::exception& e) {
      report_throw(*entry, ev, e.what());
    } catch (...) {
      report_throw(*entry, ev, "an exception not derived from std::exception");
    }
    calling_here.pop_back();
    std::lock_guard<std::mutex> lock(entry->m);
    --entry->running;
    entry->idle.notify_all();
  }
}

const void* nvtx_name_for(const std::string& kernel, const plan& p, const std::string& grid_rule_text) noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  try {
    if (!nvtx_flag().load(std::memory_order_relaxed)) return nullptr;
    const std::string text = kernel + " grid_rule=" + grid_rule_text + " " +
                             fields_text(describe_plan(p, plan_forms::text), shown::everywhere);
    return nvtxDomainRegisterStringA(nvtx_domain(), text.c_str());
  } catch (...) {
    return nullptr;
  }
#else
  (void)kernel, (void)p, (void)grid_rule_text;
  return nullptr;
#endif
}

void nvtx_push(const void* name, unsigned long long blocks) noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = static_cast<nvtxStringHandle_t>(const_cast<void*>(name));
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = blocks;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
#else
  (void)name, (void)blocks;
#endif
}

void nvtx_pop() noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  nvtxDomainRangePop(nvtx_domain());
#endif
}

bool nvtx_on() noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  return nvtx_flag().load(std::memory_order_relaxed) && nvtx_tool_present();
#else
  return false;
#endif
}

}  // namespace detail

std::uint64_t add_plan_listener(plan_listener f) {
  if (!f) throw error(errc::invalid_argument, "launchfit::add_plan_listener", "empty listener");
  detail::listeners& l = detail::the_listeners();
  auto entry = std::make_shared<detail::listener_entry>();
  entry->fn = std::move(f);
  std::lock_guard<std::mutex> lock(l.m);
  auto next = std::make_shared<detail::listener_list>(*l.list);
  const std::uint64_t id = l.next_id++;
  entry->id = id;
  next->push_back(std::move(entry));
  l.list = std::move(next);
  l.any.store(true, std::memory_order_release);
  return id;
}

bool remove_plan_listener(std::uint64_t id) {
  detail::listeners& l = detail::the_listeners();
  std::shared_ptr<const detail::listener_list> old;  // released after the locks: captures may be heavy
  std::shared_ptr<detail::listener_entry> gone;
  {
    std::lock_guard<std::mutex> lock(l.m);
    auto next = std::make_shared<detail::listener_list>();
    for (const auto& entry : *l.list) {
      if (entry->id == id) {
        gone = entry;
      } else {
        next->push_back(entry);
      }
    }
    if (!gone) return false;
    old = std::move(l.list);
    l.any.store(!next->empty(), std::memory_order_release);
    l.list = std::move(next);
  }
  // Snapshots taken before may still hold it: no call starts from now on, and the calls in progress on
  // other threads end before this returns. Calls of it on this thread (it removes itself, or a listener it
  // called does) cannot be waited for: they finish after this returns, and none follows.
  const int here = static_cast<int>(
      std::count(detail::calling_here.begin(), detail::calling_here.end(), gone.get()));
  std::unique_lock<std::mutex> lock(gone->m);
  gone->removed = true;
  gone->idle.wait(lock, [&] { return gone->running <= here; });
  return true;
}

void set_nvtx(bool on) {
#ifndef LAUNCHFIT_NO_NVTX
  detail::nvtx_flag().store(on, std::memory_order_relaxed);
#else
  (void)on;
#endif
}

bool nvtx_enabled() noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  return detail::nvtx_flag().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

}  // namespace launchfit

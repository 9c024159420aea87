// Listeners on new plans, and the NVTX ranges around launches.

#include "observe_internal.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/log.hpp"
#include "env_switch.hpp"
#include "log_internal.hpp"
#include "text.hpp"

#ifndef LAUNCHFIT_NO_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace launchfit {
namespace detail {
namespace {

struct listeners {
  std::mutex m;
  std::uint64_t next_id = 1;
  // Replaced, never changed in place: a caller iterates its own snapshot with no lock held.
  std::shared_ptr<const std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>> list =
      std::make_shared<std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>>();
  std::atomic<bool> any{false};
  std::atomic<bool> warned{false};
};

listeners& the_listeners() {
  static listeners& l = *new listeners();  // never destroyed, as every launchfit singleton
  return l;
}

#ifndef LAUNCHFIT_NO_NVTX
bool nvtx_default() {
  const switch_reading r = read_switch("LAUNCHFIT_NVTX", true);
  if (!r.warning.empty()) {
    try {
      logger()->warn("{}", r.warning);
    } catch (...) {
    }
  }
  return r.on;
}

std::atomic<bool>& nvtx_flag() {
  static std::atomic<bool>& on = *new std::atomic<bool>(nvtx_default());
  return on;
}

// NVTX reaches a tool only through an injection library named by NVTX_INJECTION64_PATH (Nsight Systems and
// Nsight Compute set it when they start the program): without one, no range can be seen, so none is made and
// a plan's name is not even built (a miss stays as cheap as without NVTX).
bool nvtx_tool_present() {
  static const bool present = [] {
    const char* v = std::getenv("NVTX_INJECTION64_PATH");
    return v && *v;
  }();
  return present;
}

nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("launchfit");
  return d;
}
#endif

}  // namespace

bool listeners_active() noexcept { return the_listeners().any.load(std::memory_order_acquire); }

void notify_plan(const plan_event& ev) noexcept {
  listeners& l = the_listeners();
  if (!l.any.load(std::memory_order_acquire)) return;
  std::shared_ptr<const std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>> snapshot;
  {
    std::lock_guard<std::mutex> lock(l.m);
    snapshot = l.list;
  }
  for (const auto& entry : *snapshot) {
    try {
      (*entry.second)(ev);
    } catch (...) {
      if (!l.warned.exchange(true)) {
        try {
          logger()->warn("a plan listener threw for kernel {}; the launch goes on (reported once)",
                         escape_text(ev.kernel, log_field_cap));
        } catch (...) {
        }
      }
    }
  }
}

const void* nvtx_name_for(const std::string& kernel, const plan& p, const std::string& grid_rule_text) noexcept {
#ifndef LAUNCHFIT_NO_NVTX
  try {
    if (!nvtx_flag().load(std::memory_order_relaxed)) return nullptr;
    std::string text = kernel + " block=" + p.block.to_string() + " grid=" + grid_rule_text +
                       " occupancy=" + std::to_string(static_cast<int>(p.occupancy.occupancy * 100 + 0.5)) +
                       "% limiter=" + limiter_names(p.occupancy.limiters) + " policy=" + p.policy;
    if (p.cooperative) text += " cooperative";
    if (p.cluster.count() > 1) text += " cluster=" + p.cluster.to_string();
    if (p.programmatic) text += " pdl";
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
  if (!f) throw error("launchfit::add_plan_listener", "LAUNCHFIT_INVALID_ARGUMENT", "empty listener");
  detail::listeners& l = detail::the_listeners();
  auto fn = std::make_shared<plan_listener>(std::move(f));
  std::lock_guard<std::mutex> lock(l.m);
  auto next = std::make_shared<std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>>(*l.list);
  const std::uint64_t id = l.next_id++;
  next->emplace_back(id, std::move(fn));
  l.list = std::move(next);
  l.any.store(true, std::memory_order_release);
  return id;
}

bool remove_plan_listener(std::uint64_t id) {
  detail::listeners& l = detail::the_listeners();
  std::shared_ptr<const std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>> old;
  std::lock_guard<std::mutex> lock(l.m);
  auto next = std::make_shared<std::vector<std::pair<std::uint64_t, std::shared_ptr<plan_listener>>>>();
  bool found = false;
  for (const auto& entry : *l.list) {
    if (entry.first == id) {
      found = true;
    } else {
      next->push_back(entry);
    }
  }
  if (!found) return false;
  old = std::move(l.list);  // released after the lock: a listener's captures may be heavy
  l.any.store(!next->empty(), std::memory_order_release);
  l.list = std::move(next);
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

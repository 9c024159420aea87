// SPDX-License-Identifier: MIT
// The policy registry: name -> factory, thread-safe, built-ins registered on first use.

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <algorithm>
#include <vector>

#include "launchfit/error.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy, parameter_error (before: in policy.hpp)
#endif
#include "launchfit/policy.hpp"
#include "lifecycle.hpp"
#include "plan_inputs.hpp"
#include "plugin_loader.hpp"
#include "text.hpp"

namespace launchfit {
namespace {

struct registry {
  std::shared_mutex mutex;
  std::map<std::string, policy_factory> factories;
};

// Never destroyed: a policy made or dropped from a static destructor still finds it. Its lock is a leaf: under
// it the map is read or changed and nothing else is locked (the plugin table is taken before it, never under
// it; a factory is called, and a removed one destroyed, after it is released).
std::shared_mutex& registry_mutex();
registry& instance() {
  static registry& r = *[] {
    auto* made = new registry;
    detail::lifecycle::on_fork_leaf_mutex<registry_mutex>();
    return made;
  }();
  return r;
}
std::shared_mutex& registry_mutex() { return instance().mutex; }

// Made at load time, before any thread: a fork never meets its initialiser (and hook registration) in progress.
const bool registry_made = (instance(), true);

// The registry as a plan input: a name registered or removed may change which policy decides a plan.
detail::plan_input registry_input() noexcept {
  static const detail::plan_input input = detail::register_plan_input("policy registry");
  return input;
}

// register_policy<P>() goes through the public register_policy(), which ensures the built-ins first;
// this flag stops that recursion while the built-ins themselves are being registered.
thread_local bool registering_builtins = false;

void ensure_builtins() {
  static std::once_flag once;
  if (registering_builtins) return;
  std::call_once(once, [] {
    registering_builtins = true;
    struct reset {
      ~reset() { registering_builtins = false; }
    } guard;
    register_policy<max_occupancy_policy>();
    register_policy<bytes_in_flight_policy>();
    register_policy<cooperative_policy>();
    register_policy<fixed_policy>();
    register_policy<fixed_dims_policy>();
    register_policy<planned_policy>();
    register_policy<constant_block_policy>();
  });
}

std::string known_names(const registry& r) {
  std::string out;
  for (const auto& entry : r.factories) out += (out.empty() ? "" : ", ") + entry.first;
  return out.empty() ? "none" : out;
}

}  // namespace

void register_policy(const std::string& name, policy_factory factory) {
  ensure_builtins();
  if (!detail::is_policy_name(name)) {
    throw error(errc::invalid_policy, "register_policy",
                "policy name " + detail::quote_text(name, 256) +
                    " cannot be selected by a policy string (expected [A-Za-z_][A-Za-z0-9_]*)");
  }
  if (!factory) {
    throw error(errc::invalid_policy, "register_policy", "no factory given for '" + name + "'");
  }
  auto& r = instance();
  std::unique_lock lock(r.mutex);
  // try_emplace leaves `factory` alone on a duplicate; it is destroyed after the lock is released.
  if (!r.factories.try_emplace(name, std::move(factory)).second) {
    throw error(errc::duplicate_policy, "register_policy",
                "a policy named '" + name + "' is already registered (registered: " + known_names(r) + ")");
  }
  lock.unlock();
  // A new policy or plugin can decide where none did (a name an override or a declining plugin falls back to).
  // The built-ins are there before anything is planned by name: no new generation for them.
  if (!registering_builtins) detail::plan_input_changed(registry_input());
}

bool unregister_policy(const std::string& name) {
  ensure_builtins();
  auto& r = instance();
  // Released after every lock: the last reference to a plugin's factory may unload its library, whose
  // static destructors may call back into launchfit.
  policy_factory removed;
  std::shared_ptr<const void> forgotten;
  {
    auto plugins_lock = detail::lock_plugin_table();
    {
      std::unique_lock lock(r.mutex);
      auto it = r.factories.find(name);
      if (it == r.factories.end()) return false;
      removed = std::move(it->second);
      r.factories.erase(it);
    }
    forgotten = detail::forget_plugin_locked(name);  // its file may be loaded again
  }
  detail::plan_input_changed(registry_input());
  return true;
}

std::vector<std::string> registered_policies() {
  ensure_builtins();
  detail::load_env_plugins();
  auto& r = instance();
  std::shared_lock lock(r.mutex);
  std::vector<std::string> names;
  names.reserve(r.factories.size());
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

namespace {

// The policies this thread is making now, outermost first: a factory that makes (directly or through
// others) the policy it is making would recurse until the stack overflows.
thread_local std::vector<std::string> making_here;

struct making_guard {
  explicit making_guard(const std::string& name) { making_here.push_back(name); }
  ~making_guard() { making_here.pop_back(); }
  making_guard(const making_guard&) = delete;
  making_guard& operator=(const making_guard&) = delete;
};

}  // namespace

std::shared_ptr<const policy> make_policy(const std::string& name,
                                          const std::map<std::string, std::string>& params) {
  if (std::find(making_here.begin(), making_here.end(), name) != making_here.end()) {
    std::string chain;
    const std::size_t first = making_here.size() > 8 ? making_here.size() - 8 : 0;  // the loop's end
    if (first > 0) chain = "... -> ";
    for (std::size_t i = first; i < making_here.size(); ++i) chain += detail::quote_text(making_here[i], 64, '\'') + " -> ";
    throw error(errc::invalid_policy, "make_policy",
                "the factory of " + detail::quote_text(name, 256, '\'') + " makes itself again (" + chain +
                    detail::quote_text(name, 64, '\'') + "): refused instead of recursing");
  }
  ensure_builtins();
  detail::load_env_plugins();
  auto& r = instance();
  policy_factory factory;
  std::string known;
  {
    std::shared_lock lock(r.mutex);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      known = known_names(r);
    } else {
      factory = it->second;  // called unlocked: a factory may itself look up policies (or run plugin code)
    }
  }
  if (!factory) {
    // The plugin table is locked only after the registry lock is released (lock order: table, registry).
    throw error(errc::unknown_policy, "make_policy",
                "unknown policy " + detail::quote_text(name, 256, '\'') + " (known: " + known + ")" +
                    detail::env_plugin_failures());
  }
  const making_guard making(name);
  try {
    auto made = factory(params);
    if (!made)
      throw error(errc::invalid_policy, "make_policy", "the factory of '" + name + "' returned no policy");
    return made;
  } catch (const detail::bad_parameter& e) {
    throw detail::parameter_error(name, e);  // keeps the key, so a policy string points at it
  } catch (const std::invalid_argument& e) {
    throw error(errc::bad_policy_parameter, "make_policy", "policy '" + name + "': " + e.what());
  }
}

}  // namespace launchfit

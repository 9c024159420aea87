// The policy registry: name -> factory, thread-safe, built-ins registered on first use.

#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/policy.hpp"
#include "plugin_loader.hpp"

namespace launchfit {
namespace {

struct registry {
  std::shared_mutex mutex;
  std::map<std::string, policy_factory> factories;
};

registry& instance() {
  static registry r;
  return r;
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
  if (!factory) {
    throw error("register_policy", "LAUNCHFIT_INVALID_POLICY", "no factory given for '" + name + "'");
  }
  auto& r = instance();
  std::unique_lock lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    throw error("register_policy", "LAUNCHFIT_DUPLICATE_POLICY",
                "a policy named '" + name + "' is already registered (registered: " + known_names(r) + ")");
  }
}

bool unregister_policy(const std::string& name) {
  ensure_builtins();
  auto& r = instance();
  std::unique_lock lock(r.mutex);
  return r.factories.erase(name) > 0;
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

std::shared_ptr<const policy> make_policy(const std::string& name,
                                          const std::map<std::string, std::string>& params) {
  ensure_builtins();
  detail::load_env_plugins();
  auto& r = instance();
  policy_factory factory;
  {
    std::shared_lock lock(r.mutex);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      throw error(
          "make_policy", "LAUNCHFIT_UNKNOWN_POLICY",
          "unknown policy '" + name + "' (known: " + known_names(r) + ")" + detail::env_plugin_failures());
    }
    factory = it->second;  // called unlocked: a factory may itself look up policies
  }
  try {
    auto made = factory(params);
    if (!made)
      throw error("make_policy", "LAUNCHFIT_INVALID_POLICY",
                  "the factory of '" + name + "' returned no policy");
    return made;
  } catch (const std::invalid_argument& e) {
    throw error("make_policy", "LAUNCHFIT_BAD_POLICY_PARAMETER", "policy '" + name + "': " + e.what());
  }
}

}  // namespace launchfit

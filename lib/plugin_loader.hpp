// SPDX-License-Identifier: MIT
#pragma once
// Internal: the link between the policy registry and the plugin loader, and the escaping of text that comes
// from plugins (or any other untrusted source) before it reaches a message or a log line.

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace launchfit::detail {

// Loads every plugin named in LAUNCHFIT_PLUGINS, once per process; failures are logged, not thrown. A call
// from plugin code while that list loads returns at once (the registry as it stands).
void load_env_plugins();
// "; LAUNCHFIT_PLUGINS: <path>: <reason>" for each plugin that failed to load there, or "".
std::string env_plugin_failures();

// Whether `name` matches the policy-string name grammar [A-Za-z_][A-Za-z0-9_]*.
bool is_policy_name(std::string_view name);

// unregister_policy() holds this lock around removing a name, so a concurrent load_plugin() of the same
// file sees both the registry and the loaded-plugin list before or after, never between. Lock order: the
// plugin table, then the registry.
std::unique_lock<std::mutex> lock_plugin_table();
// With lock_plugin_table() held: drops the loaded plugin registered as `name`, so its file can be loaded
// again. The result keeps it alive; release it after unlocking (the last release may dlclose the library).
std::shared_ptr<const void> forget_plugin_locked(const std::string& name);

}  // namespace launchfit::detail

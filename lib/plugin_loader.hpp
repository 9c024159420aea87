#pragma once
// Internal: the link between the policy registry and the plugin loader.

#include <string>

namespace launchfit::detail {

// Loads every plugin named in LAUNCHFIT_PLUGINS, once per process; failures are logged, not thrown.
void load_env_plugins();
// "; LAUNCHFIT_PLUGINS: <path>: <reason>" for each plugin that failed to load there, or "".
std::string env_plugin_failures();

}  // namespace launchfit::detail

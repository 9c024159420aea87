#pragma once
// launchfit::load_plugin — shared-object policies behind the C ABI of launchfit/plugin.h.

#include <cstdint>
#include <string>
#include <vector>

#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {

struct plugin_info {
  std::string name;               // the policy name it is registered under
  std::string version;            // the plugin's own version string
  std::string path;               // as given to load_plugin / LAUNCHFIT_PLUGINS
  std::uint32_t abi_version = 0;  // (major << 16) | minor the plugin was built against
};

// Loads a plugin and registers it as a policy under its name, so policy_from_string("<name>(k=v)") and
// LAUNCHFIT_POLICY can select it. Throws launchfit::error naming the file and the reason (missing file, no
// launchfit_plugin_entry symbol, ABI major mismatch, descriptor too small, missing function, duplicate name).
plugin_info load_plugin(const std::string& path);

// Every plugin loaded so far, including those from LAUNCHFIT_PLUGINS=path1:path2 (read once, on first use
// of the registry; a plugin that fails to load there is logged as an error and reported when its policy
// name is asked for).
std::vector<plugin_info> loaded_plugins();

// Passes a measured time of a plan back to the plugin that chose it; does nothing for other policies.
void plugin_feedback(const policy& chooser, const plan& chosen, double ms);

}  // namespace launchfit

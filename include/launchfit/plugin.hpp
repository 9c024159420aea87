// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup plugin_abi
/// \brief Loading plugins (load_plugin(), LAUNCHFIT_PLUGINS), the plugins loaded, and feedback to the plugin
/// that chose a plan.
///
// launchfit::load_plugin — shared-object policies behind the C ABI of launchfit/plugin.h.

#include <cstdint>
#include <string>
#include <vector>

#include "launchfit/export.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {

// A loaded plugin, as load_plugin() returns it.
struct plugin_info {
  std::string name;               // the policy name it is registered under
  std::string version;            // the plugin's own version string
  std::string path;               // as given to load_plugin / LAUNCHFIT_PLUGINS
  std::uint32_t abi_version = 0;  // (major << 16) | minor the plugin was built against
  std::string resolved_path;      // the file loaded: absolute, symlinks resolved
};

// Loads a plugin and registers it as a policy under its name, so policy_from_string("<name>(k=v)") and
// LAUNCHFIT_POLICY can select it. `path` is always a file path: a relative one, a bare name included, is
// resolved against the current directory (never searched in the library path as dlopen would), symlinks
// are resolved, and it must be a regular file (a directory, FIFO or device is refused before dlopen). The
// resolved path is logged at info level. Loading a file already loaded (under any path: a symlink, a hard
// link) returns that plugin. Throws launchfit::error errc::plugin_refused (LAUNCHFIT_PLUGIN_REFUSED) naming
// the file and the reason (no such file, not a regular file, dlopen failure, no launchfit_plugin_entry
// symbol, an entry that threw, ABI major mismatch, descriptor too small, missing function, invalid or
// duplicate name). May be called from plugin code (its entry, functions and static constructors):
// launchfit holds no lock while plugin code runs; a plugin loading itself from its own entry or
// constructor is refused.
LAUNCHFIT_API plugin_info load_plugin(const std::string& path);

// Every plugin loaded and registered now, including those from LAUNCHFIT_PLUGINS=path1:path2 (read once,
// on first use of the registry; a plugin that fails to load there is logged as an error and reported when
// its policy name is asked for). unregister_policy(<plugin name>) removes a plugin from this list and lets
// its file be loaded again; policies made from it keep its library loaded until they are destroyed.
LAUNCHFIT_API std::vector<plugin_info> loaded_plugins();

// Passes a measured time of a plan back to the plugin that chose it; does nothing for other policies.
LAUNCHFIT_API void plugin_feedback(const policy& chooser, const plan& chosen, double ms);

}  // namespace launchfit

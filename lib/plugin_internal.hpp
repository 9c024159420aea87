// SPDX-License-Identifier: MIT
#pragma once
// Internal to the plugin files: plugin.cpp loads shared objects and keeps the table of loaded plugins,
// plugin_abi.cpp converts between launchfit's types and the C ABI's structs (launchfit/plugin.h), and
// plugin_policy.cpp is the policy whose decisions a loaded plugin's code makes.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "launchfit/plugin.h"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "text.hpp"

namespace launchfit::detail::plugin_internal {

constexpr std::size_t text_cap_bytes = 1024;  // escaped plugin text kept (a reason, a message)
constexpr int max_plugin_nesting = 4;         // plugin code calling launchfit calling plugin code ...

// ---- the loaded plugins (plugin.cpp) --------------------------------------------------------------------

// dlopen/dlclose one at a time, as the dynamic loader itself does (its own lock is recursive too, so a
// plugin's constructor may load another plugin): makes the ordering visible to ThreadSanitizer. Only the
// loader calls run under it; never a plugin's entry points.
std::recursive_mutex& loader_mutex();

// The shared object, closed when the last plugin entry and policy that refer to its code are gone.
struct library {
  void* handle = nullptr;
  explicit library(void* h) : handle(h) {}
  library(const library&) = delete;
  library& operator=(const library&) = delete;
  ~library();
};

struct loaded_plugin {
  plugin_info info;
  std::shared_ptr<library> lib;  // keeps the code and the descriptor loaded
  const launchfit_plugin_descriptor* descriptor = nullptr;
  dev_t device = 0;  // the file, so symlinks and hard links to it are the same plugin
  ino_t inode = 0;
};

// Whether a loaded plugin is registered as `name`.
bool is_plugin_name(const std::string& name);

// ---- calling plugin code ---------------------------------------------------------------------------------

// Depth of plugin calls on this thread.
inline thread_local int plugin_nesting = 0;

// Runs plugin code: an exception becomes `failure` ("threw: ..."), and calls nested deeper than
// max_plugin_nesting on one thread (a plugin calling back into itself) are refused instead of recursing.
template <class F>
bool call_plugin(F&& f, std::string& failure) {
  if (plugin_nesting >= max_plugin_nesting) {
    failure = "not called: plugin calls nested " + std::to_string(plugin_nesting) +
              " deep (a plugin calling back into itself?)";
    return false;
  }
  ++plugin_nesting;
  struct leave {
    ~leave() { --plugin_nesting; }
  } guard;
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    try {
      failure = "threw: " + detail::escape_text(e.what(), text_cap_bytes);
    } catch (...) {
      failure = "threw";
    }
  } catch (...) {
    failure = "threw an exception of unknown type";
  }
  return false;
}

// ---- the C ABI's structs (plugin_abi.cpp) ----------------------------------------------------------------

// Text from a plugin buffer of `size` bytes (NUL or not), escaped and bounded; `otherwise` when empty.
std::string plugin_text(const char* buf, std::size_t size, const char* otherwise = "");

launchfit_device to_c(const device_limits& d);
launchfit_kernel to_c(const kernel_resources& k);
launchfit_plan to_c(const plan& p);
// What the plugin finds before it decides: block 0x1x1, smem from the query, grid from the work.
launchfit_plan blank_plan();
// Throws launchfit::error (LAUNCHFIT_INVALID_PLAN) for what validate_plan() cannot see in a C++ plan (see
// plugin_abi.cpp); informational numbers are cleaned.
plan from_c(const launchfit_plan& c, const query& q);
// The query as the plugin reads it, pointing at `device` and `kernel` (which must outlive it), with the
// callbacks that answer residency, smem and trials from `q`.
launchfit_query to_c(const query& q, const launchfit_device& device, const launchfit_kernel& kernel);
// Items of the work in every dimension (saturating): what a plugin sizes and buckets by.
std::uint64_t total_items(const work& w) noexcept;
// Throws where a plugin's block of more than one row is not one this launch makes (see plugin_abi.cpp).
void check_own_shape(const query& q, const plan& p);
// Throws where a plugin's plan (its choice or a trial's) is one the launch may not run beyond what
// validate_plan() checks: a fixed grid for items work, a block the launch does not make.
void check_plugin_plan(const query& q, const plan& p);

// ---- the policy (plugin_policy.cpp) ----------------------------------------------------------------------

// Makes the policy of a loaded plugin from a policy string's parameters (`fallback` is launchfit's own).
policy_factory factory_for(const std::shared_ptr<const loaded_plugin>& plugin);
// Whether `p` is a plugin's policy: the policies that tune (autotune), for which the trials are prepared before
// the policy is asked (tuning_record::prepare_trials()); any other policy's first trial prepares them.
bool is_plugin_policy(const policy& p) noexcept;
// A plugin policy's plan refused after choose() returned (`why`: the launch's requirements, which the plugin
// cannot see, e.g. a cooperative plan for a launch that is not): the plugin's fallback decides (fallback= or
// LAUNCHFIT_PLUGIN_FALLBACK=1), else `why` is thrown as the plugin's invalid plan.
plan plugin_fallback(const policy& p, const query& q, const error& why);

}  // namespace launchfit::detail::plugin_internal

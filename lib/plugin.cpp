// SPDX-License-Identifier: MIT
// Shared-object policies: loading a plugin (its path, its descriptor's ABI checks), the table of loaded
// plugins and LAUNCHFIT_PLUGINS. The policy a plugin decides in is plugin_policy.cpp's; the C structs it
// reads are plugin_abi.cpp's.

#include "launchfit/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "log_internal.hpp"
#include "plugin_internal.hpp"
#include "plugin_loader.hpp"
#include "settings.hpp"
#include "text.hpp"

namespace launchfit {
namespace {

using detail::plugin_internal::call_plugin;
using detail::plugin_internal::factory_for;
using detail::plugin_internal::library;
using detail::plugin_internal::loaded_plugin;
using detail::plugin_internal::loader_mutex;
using detail::plugin_internal::text_cap_bytes;

constexpr std::size_t name_scan_bytes = 256;  // longest descriptor name read (policy names are shorter)
constexpr std::size_t version_scan_bytes = 4096;
constexpr std::size_t version_cap_bytes = 64;
// LAUNCHFIT_PLUGINS failures named in the log and in errors: the rest are counted (a list of 15,000 missing
// paths logged 15,000 lines, and every unknown policy's error carried them all).
constexpr std::size_t env_failures_named = 8;

// Never destroyed (a policy dropped from a static destructor still finds it). Lock order: this table, then
// the policy registry. No lock is held while plugin code runs, nor while a library is closed.
struct plugin_table {
  std::mutex mutex;
  std::vector<std::shared_ptr<const loaded_plugin>> plugins;
  std::vector<std::string> env_failures;  // the first env_failures_named, each logged once
  std::set<std::string> env_failed_paths;
  std::size_t env_failures_unnamed = 0;         // failures past those (a path may count once per thread's pass)
  std::size_t env_failures_unnamed_logged = 0;  // of those, already counted in a log line
  std::atomic<bool> env_done{false};
};

plugin_table& plugins() {
  static plugin_table& table = *new plugin_table;
  return table;
}

// Files this thread is loading now (a plugin that loads itself from its entry or a constructor).
thread_local std::vector<std::pair<dev_t, ino_t>> loading_here;
// This thread is loading LAUNCHFIT_PLUGINS (a plugin calling back sees the registry as it stands).
thread_local bool loading_env_here = false;

}  // namespace

namespace detail::plugin_internal {

std::recursive_mutex& loader_mutex() {
  static std::recursive_mutex& m = *new std::recursive_mutex();  // never destroyed
  return m;
}

library::~library() {
  if (handle) {
    std::lock_guard<std::recursive_mutex> lock(loader_mutex());
    ::dlclose(handle);
  }
}

bool is_plugin_name(const std::string& name) {
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  for (const auto& p : table.plugins) {
    if (p->info.name == name) return true;
  }
  return false;
}

}  // namespace detail::plugin_internal

namespace {

std::string version_string(std::uint32_t v) {
  return std::to_string(LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(v)) + "." +
         std::to_string(LAUNCHFIT_PLUGIN_ABI_MINOR_OF(v));
}

// The policy-string name grammar [A-Za-z_][A-Za-z0-9_]*, read at most `max` bytes far.
bool valid_name(const char* s, std::size_t max) {
  if (!s) return false;
  const std::size_t n = strnlen(s, max);
  return n > 0 && n < max && detail::is_policy_name(std::string_view(s, n));
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw error(errc::plugin_refused, "load_plugin",
              "plugin " + detail::quote_text(path, text_cap_bytes, '\'') + ": " + why);
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

struct plugin_file {
  std::string path;  // absolute, symlinks resolved
  dev_t device = 0;
  ino_t inode = 0;
};

// One rule for every path: a file path, relative ones (bare names included) against the current directory,
// never searched in the library path; it must be a regular file, checked before dlopen (which would block
// forever opening a FIFO).
plugin_file resolve(const std::string& given) {
  if (given.empty()) refuse(given, "empty path");
  if (given.find('\0') != std::string::npos) refuse(given, "the path contains a NUL byte");
  char* real = ::realpath(given.c_str(), nullptr);
  if (!real) {
    const int err = errno;
    refuse(given, err == ENOENT ? std::string("no such file")
                                : std::string("cannot resolve the path: ") + std::strerror(err));
  }
  plugin_file f;
  f.path = real;
  std::free(real);
  struct stat st {};
  if (::stat(f.path.c_str(), &st) != 0) {
    refuse(given, "cannot stat " + detail::escape_text(f.path, text_cap_bytes) + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) refuse(given, std::string("not a regular file (") + file_kind(st.st_mode) + ")");
  f.device = st.st_dev;
  f.inode = st.st_ino;
  return f;
}

// The plugin already loaded from this file (or, after dlopen, this library), or nullptr. Table locked.
std::shared_ptr<const loaded_plugin> find_loaded(const plugin_table& table, const plugin_file& f,
                                                 const void* handle) {
  for (const auto& p : table.plugins) {
    if ((p->device == f.device && p->inode == f.inode) || (handle && p->lib->handle == handle)) return p;
  }
  return nullptr;
}

// Checks the descriptor a plugin's entry returned; returns its name. Refuses with the reason.
std::string check_descriptor(const std::string& path, const launchfit_plugin_descriptor* d) {
  if (!d) refuse(path, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL "() returned no descriptor");
  const std::uint32_t major = LAUNCHFIT_PLUGIN_ABI_MAJOR_OF(d->abi_version);
  if (major != LAUNCHFIT_PLUGIN_ABI_MAJOR) {
    refuse(path, "ABI version mismatch: plugin built for ABI " + version_string(d->abi_version) +
                     ", this launchfit implements ABI " + version_string(LAUNCHFIT_PLUGIN_ABI_VERSION) +
                     (major > LAUNCHFIT_PLUGIN_ABI_MAJOR ? " (plugin is newer: upgrade launchfit)"
                                                         : " (rebuild the plugin against this launchfit)"));
  }
  if (d->struct_size < LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE) {
    refuse(path, "ABI version mismatch: descriptor struct_size " + std::to_string(d->struct_size) +
                     " is smaller than the ABI " + std::to_string(LAUNCHFIT_PLUGIN_ABI_MAJOR) +
                     ".0 minimum " + std::to_string(LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE));
  }
  if (!valid_name(d->name, name_scan_bytes)) {
    const std::string shown =
        d->name ? detail::quote_text(std::string_view(d->name, strnlen(d->name, name_scan_bytes)),
                                     text_cap_bytes, '\'')
                : "'(null)'";
    refuse(path, "invalid policy name " + shown + " (expected [A-Za-z_][A-Za-z0-9_]*, at most " +
                     std::to_string(name_scan_bytes - 1) + " characters)");
  }
  const std::string name = d->name;
  if (!d->create || !d->choose || !d->destroy) {
    refuse(path, "plugin '" + name + "' lacks " +
                     (!d->create   ? "create"
                      : !d->choose ? "choose"
                                   : "destroy") +
                     "()");
  }
  return name;
}

// Pops this thread's in-progress marker for a file.
struct loading_mark {
  explicit loading_mark(const plugin_file& f) { loading_here.emplace_back(f.device, f.inode); }
  ~loading_mark() { loading_here.pop_back(); }
  loading_mark(const loading_mark&) = delete;
  loading_mark& operator=(const loading_mark&) = delete;
};

// No launchfit lock is held while plugin code runs (dlopen runs its constructors, then its entry): a plugin
// may call back into launchfit. Two threads loading one file both run it; the first to register wins and
// the other returns the same plugin, so "load once" needs no lock held across plugin code.
plugin_info load(const std::string& given) {
  const plugin_file f = resolve(given);
  auto& table = plugins();
  {
    std::lock_guard lock(table.mutex);
    if (auto p = find_loaded(table, f, nullptr)) return p->info;  // the same file again is harmless
  }
  for (const auto& [device, inode] : loading_here) {
    if (device == f.device && inode == f.inode) {
      refuse(given,
             "it is already being loaded on this thread (a plugin loading itself from its entry point "
             "or a static constructor)");
    }
  }
  const loading_mark mark(f);

  void* handle = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(loader_mutex());
    handle = ::dlopen(f.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle) {
    const char* why = ::dlerror();
    refuse(given, "dlopen failed: " + detail::escape_text(why ? why : "unknown error", text_cap_bytes));
  }
  auto lib = std::make_shared<library>(handle);

  void* entry = ::dlsym(handle, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    refuse(given, "no symbol " LAUNCHFIT_PLUGIN_ENTRY_SYMBOL
                  " (define it extern \"C\" with LAUNCHFIT_PLUGIN_EXPORT)");
  }
  const launchfit_plugin_descriptor* d = nullptr;
  std::string failure;
  if (!call_plugin([&] { d = reinterpret_cast<launchfit_plugin_entry_fn>(entry)(); }, failure)) {
    refuse(given, LAUNCHFIT_PLUGIN_ENTRY_SYMBOL "() " + failure);
  }
  const std::string name = check_descriptor(given, d);

  auto plugin = std::make_shared<loaded_plugin>();
  const char* version = d->version ? d->version : "";
  plugin->info = plugin_info{
      name,
      detail::escape_text(std::string_view(version, strnlen(version, version_scan_bytes)), version_cap_bytes),
      given, d->abi_version, f.path};
  plugin->lib = lib;
  plugin->descriptor = d;
  plugin->device = f.device;
  plugin->inode = f.inode;
  {
    std::lock_guard lock(table.mutex);
    // Loaded meanwhile by another thread, or by this plugin's own code through another path.
    if (auto p = find_loaded(table, f, handle)) return p->info;
    try {
      register_policy(name, factory_for(plugin));
    } catch (const error& e) {
      refuse(given, "duplicate name: " + e.message());
    }
    table.plugins.push_back(plugin);
  }
  detail::logger()->info("loaded plugin {} {} from {} (ABI {})", name, plugin->info.version,
                         detail::escape_text(f.path, text_cap_bytes), version_string(d->abi_version));
  return plugin->info;
}

}  // namespace

namespace detail {

bool is_policy_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void load_env_plugins() {
  auto& table = plugins();
  // A plugin loading from LAUNCHFIT_PLUGINS that calls back into launchfit sees the registry as it stands.
  if (table.env_done.load(std::memory_order_acquire) || loading_env_here) return;
  const std::string& list = current_settings().plugins.paths;
  if (list.empty()) {
    table.env_done.store(true, std::memory_order_release);
    return;
  }
  loading_env_here = true;
  struct reset {
    ~reset() { loading_env_here = false; }
  } guard;
  // Threads arriving before the list is done each go through it (loading a loaded file is harmless), so
  // none waits on another thread's plugin code; each failure is recorded and logged once.
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(':', begin);
    if (end == std::string::npos) end = list.size();
    const std::string path = list.substr(begin, end - begin);
    begin = end + 1;
    if (path.empty()) continue;
    std::string failure;
    try {
      load(path);
    } catch (const error& e) {
      failure = e.message();
    } catch (const std::exception& e) {
      failure =
          "plugin " + quote_text(path, text_cap_bytes, '\'') + ": " + escape_text(e.what(), text_cap_bytes);
    }
    if (failure.empty()) continue;
    bool named = false;
    {
      std::lock_guard lock(table.mutex);
      if (table.env_failed_paths.size() < env_failures_named && table.env_failed_paths.insert(path).second) {
        table.env_failures.push_back(failure);
        named = true;
      } else if (!table.env_failed_paths.count(path)) {
        ++table.env_failures_unnamed;  // a list of thousands is named in its first few, then counted
      }
    }
    if (named) logger()->error("LAUNCHFIT_PLUGINS: {}", failure);
  }
  std::size_t unnamed = 0;
  {
    std::lock_guard lock(table.mutex);
    unnamed = std::exchange(table.env_failures_unnamed_logged, table.env_failures_unnamed);
    unnamed = table.env_failures_unnamed - unnamed;
  }
  if (unnamed > 0) logger()->error("LAUNCHFIT_PLUGINS: {} more paths failed to load (the first {} are named)", unnamed,
                                   env_failures_named);
  table.env_done.store(true, std::memory_order_release);
}

std::string env_plugin_failures() {
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  std::string out;
  for (const auto& f : table.env_failures) out += "; LAUNCHFIT_PLUGINS: " + f;
  if (table.env_failures_unnamed > 0)
    out += "; LAUNCHFIT_PLUGINS: " + std::to_string(table.env_failures_unnamed) + " more paths failed to load";
  return out;
}

std::unique_lock<std::mutex> lock_plugin_table() { return std::unique_lock(plugins().mutex); }

std::shared_ptr<const void> forget_plugin_locked(const std::string& name) {
  auto& table = plugins();
  for (auto it = table.plugins.begin(); it != table.plugins.end(); ++it) {
    if ((*it)->info.name == name) {
      std::shared_ptr<const void> forgotten = std::move(*it);
      table.plugins.erase(it);
      return forgotten;
    }
  }
  return nullptr;
}

}  // namespace detail

plugin_info load_plugin(const std::string& path) {
  detail::load_env_plugins();  // so a plugin named there and here is one plugin, not a duplicate
  return load(path);
}

std::vector<plugin_info> loaded_plugins() {
  detail::load_env_plugins();
  auto& table = plugins();
  std::lock_guard lock(table.mutex);
  std::vector<plugin_info> out;
  for (const auto& p : table.plugins) out.push_back(p->info);
  return out;
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// The plan file's layer (file_store.hpp): lookups, opening and closing the file, calibrations.

#include "../driver.hpp"
#include "../log_internal.hpp"
#include "../plan_inputs.hpp"
#include "../settings.hpp"
#include "../text.hpp"
#include "file_load.hpp"
#include "file_store.hpp"
#include "launchfit/error.hpp"

namespace launchfit::detail {
namespace {

// What this file changes of every plan's inputs (plan_inputs.hpp), registered once.
const plan_input file_opened_input = register_plan_input("plan file opened");
const plan_input file_closed_input = register_plan_input("plan file closed");
const plan_input calibration_input = register_plan_input("calibration stored");

}  // namespace
}  // namespace launchfit::detail

namespace launchfit {
namespace detail {
namespace plan_file {

void warn(const std::string& path, const std::string& what) {
  logger()->warn("plan cache file {}: {}", escape_text(path, path_text_bytes), what);
}

file_store& state() {
  static file_store& f = *new file_store;
  return f;
}

// Under memory (lk). Reads what another process wrote into the table, when the file's identity changed.
// Returns whether an entry a plan may depend on changed.

std::vector<stored_entry> file_store::find(const stored_key& key) {
  std::vector<stored_entry> out;
  identity_check check;
  {
    std::lock_guard lock(memory);
    if (!open) return out;
    ++counts.lookups;
    table.note_lookup(key);
    table.each_of(key.kernel, key.policy, &key.smem_rule, [&](const stored_entry& e) {
      if (e.key.device_uuid == key.device_uuid || same_device_model(e.key, key)) out.push_back(e);
    });
    counts.hits += out.size();
    check = check_due();
  }
  check_identity(check);
  return out;
}

// Under config. Writes what the file in use still has pending (bounded wait), before another file (or
// the same one again) is read.
void flush_before_switch(file_store& f) {
  std::unique_lock lk(f.memory);
  if (!f.open || flush_locked(f, lk, close_wait) || !f.writable) return;
  const std::string path = f.path;
  const std::size_t left = f.pending.size() + f.in_flight.size();
  lk.unlock();
  warn(path, std::to_string(left) + " plan(s) not written before the file was closed: its lock stayed held");
}

// Under config. Installs `next` (or no file). Returns the warnings of the load.
std::vector<std::string> switch_file(file_store& f, const std::string& path, cache_file_mode mode,
                                     loaded_file* next) {
  std::unique_lock lk(f.memory);
  ++f.epoch;
  f.pending.clear();
  f.in_flight.clear();
  f.stored = f.written = 0;
  f.not_before = {};
  f.lock_warned = false;
  f.retry_why.clear();
  f.failure.clear();
  f.table.clear();
  f.known = {};
  f.next_stat = {};
  f.refresh_wanted = false;
  f.open = next != nullptr;
  if (next) {
    f.path = path;
    f.real = std::move(next->real);
    f.mode = mode;
    f.writable = next->writable && mode == cache_file_mode::read_write;
    f.max_bytes = next->max_bytes;
    f.max_entries = next->max_entries;
    for (auto& e : next->entries) f.table.put(std::move(e));
    f.known = next->id;
    f.counts.refused += next->refused;
    f.seed = f.writable ? std::move(next->view) : disk_view{};
    f.next_check = {};
  } else {
    f.seed = disk_view{};
    f.path.clear();
    f.real.clear();
    f.writable = false;
  }
  f.done->notify_all();
  const bool reads = f.writable;
  lk.unlock();
  if (reads) f.wake_writer();  // the writer also reads what other processes write
  return next ? std::move(next->warnings) : std::vector<std::string>{};
}

void open_locked(file_store& f, const std::string& path, cache_file_mode mode) {
  flush_before_switch(f);
  loaded_file next = load(path, mode);
  for (const auto& w : switch_file(f, path, mode, &next)) warn(path, w);
}

// The file of LAUNCHFIT_CACHE, opened at the first use of the store. No plan input changes: every miss asks
// the store first, so nothing was planned before it.
void ensure_env(file_store& f) {
  if (f.env_checked.load(std::memory_order_acquire)) return;
  std::lock_guard lock(f.config);
  if (f.env_checked.load(std::memory_order_relaxed)) return;
  // LAUNCHFIT_CACHE_MODE: a typo there is `frozen` (settings.hpp), never a file written that was meant to be
  // read only.
  const settings::cache_settings& set = current_settings().cache;
  if (!set.file.empty()) open_locked(f, set.file, set.mode);
  f.env_checked.store(true, std::memory_order_release);
}

file_store& ready_state() {
  file_store& f = state();
  ensure_env(f);
  return f;
}

stored_key calibration_key(const device_limits& dev, int driver_version) {
  stored_key k = stored_key_for(dev, driver_version, kernel_resources{}, calibration_policy, "", 0);
  k.kernel = calibration_kernel;
  return k;
}

}  // namespace plan_file

using namespace plan_file;

plan_store_layer& file_layer() { return ready_state(); }

bool refresh_cache_file(unsigned max_wait_ms) {
  file_store& f = ready_state();
  std::unique_lock lk(f.memory);
  if (!f.refreshed_from_disk()) return false;
  const std::uint64_t target = ++f.refresh_asked;
  const unsigned epoch = f.epoch;
  f.refresh_wanted = true;
  lk.unlock();
  f.wake_writer();
  lk.lock();
  f.done->wait_for(lk, milliseconds(max_wait_ms), [&] { return f.refreshed >= target || f.epoch != epoch; });
  return f.epoch == epoch && f.refreshed >= target;
}

}  // namespace detail

void set_cache_file(const std::string& path, cache_file_mode mode) {
  auto& f = detail::state();
  {
    std::lock_guard lock(f.config);
    f.env_checked.store(true, std::memory_order_release);
    detail::open_locked(f, path, mode);
  }
  // Whatever the file holds may now win over a plan made before: stored plans, a calibrated target.
  detail::plan_input_changed(detail::file_opened_input);
}

void close_cache_file() {
  auto& f = detail::state();
  bool was_open = false;
  {
    std::lock_guard lock(f.config);
    f.env_checked.store(true, std::memory_order_release);
    detail::flush_before_switch(f);
    {
      std::lock_guard memory(f.memory);
      was_open = f.open;
    }
    detail::switch_file(f, "", cache_file_mode::read_write, nullptr);
  }
  if (was_open) detail::plan_input_changed(detail::file_closed_input);  // its plans and calibrations are gone
}

bool flush_cache_file(unsigned max_wait_ms) { return detail::ready_state().flush(max_wait_ms); }

std::optional<std::size_t> find_calibration(const device_limits& dev, int driver_version) {
  auto& f = detail::ready_state();
  const stored_key key = detail::calibration_key(dev, driver_version);
  const bool model = detail::current_match() == cache_match::model;
  std::optional<std::size_t> out;
  std::string path;
  detail::file_store::identity_check check;
  {
    std::lock_guard lock(f.memory);
    if (!f.open) return std::nullopt;
    path = f.path;
    check = f.check_due();
    if (const detail::stored_entry* e = f.table.exact(key); e && e->bytes_in_flight_per_sm) {
      out = static_cast<std::size_t>(e->bytes_in_flight_per_sm);
    } else {
      const auto calibrations = [&](const auto& each) {
        f.table.each_of(detail::calibration_kernel, detail::calibration_policy, nullptr, each);
      };
      const detail::stored_entry* best = detail::best_entry(calibrations, key, [&](const stored_key& k) {
        return k.device_uuid == key.device_uuid || (model && same_device_model(k, key));
      });
      if (best && best->bytes_in_flight_per_sm) out = static_cast<std::size_t>(best->bytes_in_flight_per_sm);
    }
  }
  f.check_identity(check);
  // The file said a target; used only when this device could have measured it (a stored 1 B per SM would
  // size every block to one warp).
  if (out) {
    if (const std::string why = detail::implausible_calibration(*out, dev); !why.empty()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        detail::warn(path, "calibration not used: " + why + "; bytes_in_flight keeps its default");
      }
      return std::nullopt;
    }
  }
  return out;
}

void store_calibration(const device_limits& dev, int driver_version, std::size_t bytes_in_flight_per_sm) {
  if (const std::string why = detail::implausible_calibration(bytes_in_flight_per_sm, dev); !why.empty())
    throw error(errc::invalid_argument, "store_calibration", why);
  auto& f = detail::ready_state();
  detail::stored_entry e;
  e.key = detail::calibration_key(dev, driver_version);
  e.stored_at_ms = detail::now_ms();
  e.bytes_in_flight_per_sm = bytes_in_flight_per_sm;
  e.plan.block = dims{1, 1, 1};
  e.plan.block_threads = 1;
  e.plan.reason =
      "measured by launchfit-calibrate: " + std::to_string(bytes_in_flight_per_sm) + " B in flight per SM";
  // No plan key holds bytes_in_flight's default target: plans made under the previous one are not reused.
  if (f.enqueue(std::move(e))) detail::plan_input_changed(detail::calibration_input);
}

void store_bytes_in_flight_calibration(std::size_t bytes_per_sm) {
  store_calibration(device_limits::query_current(), detail::driver().version, bytes_per_sm);
}

std::optional<std::size_t> bytes_in_flight_calibration() {
  return find_calibration(device_limits::query_current(), detail::driver().version);
}

bool cache_file_open() {
  auto& f = detail::ready_state();
  std::lock_guard lock(f.memory);
  return f.open;
}

std::size_t stored_plan_count() {
  auto& f = detail::ready_state();
  std::lock_guard lock(f.memory);
  return f.open ? f.table.size() : 0;
}

}  // namespace launchfit

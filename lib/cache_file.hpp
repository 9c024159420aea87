// SPDX-License-Identifier: MIT
#pragma once
// Internal: the plan store as the planner and the tools see it. The planner looks plans up on a miss
// (find_stored_plan) and records the plans it makes (store_plan); the layers below (store/chain.hpp) are the
// loaded table of the plan file (LAUNCHFIT_CACHE) with its background writer, then the optional remote
// store (remote_store.hpp), asked only when the file has no plan. The file's format is
// plan_file_format.hpp, its locking and atomic writes file_lock.hpp, what a write keeps plan_merge.hpp.
//
// What the store serves is an input of every plan beyond its key: whenever it may have changed (a file
// opened or closed, a calibration stored, the file changed by another process in an entry this process
// looked up or in a calibration) the store calls plan_input_changed() (plan_inputs.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "file_lock.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/plan.hpp"
#include "plan_file_format.hpp"

namespace launchfit {

// Looks up a stored plan, best first:
//   "cache-file"                          this GPU (UUID), driver and size bucket;
//   "cache-file-same-model"               another GPU of the same model (unless cache_match::exact): the
//                                         same driver first, then the nearest compatible one;
//   "cache-file-other-bucket"             this GPU, another size bucket (only when exact_bucket is false);
//   "cache-file-same-model-other-bucket"  both (only when exact_bucket is false, unless cache_match::exact);
//   "remote"                              none of these: the remote store's, by the same rules.
// Ties go to the nearest bucket, then the newest entry, then the smallest UUID. Never waits for file I/O,
// except that the first call of a process reads the LAUNCHFIT_CACHE file (bounded in size, never a special
// file), and at most every 100 ms a call looks at the file's identity (one stat) to wake the refresh when
// another process wrote it. Every entry served passed validate_stored_entry(); the caller still validates
// the plan for the launch.
std::optional<plan> find_stored_plan(const stored_key& key, bool exact_bucket = true);
// Records a plan: lookups see it at once; a background writer merges it into the file within about
// 20 ms (flush_cache_file(), set_cache_file(), close_cache_file() and a normal exit wait for it), and the
// remote store, when there is one, queues it. Never waits for file I/O or another process's lock. Nothing
// is written to a frozen file, and nothing anywhere for a "fallback" plan. `measured`: how a tuned plan
// was measured (detail::plan_measurement; none for a static plan); a plan measured but not clean is kept in
// the file only, never shared through the remote store. Its conditions text is cleaned and cut; a
// measurement out of the ranges a reader accepts is dropped (the plan is stored unmeasured).
void store_plan(const stored_key& key, const plan& p,
                std::optional<detail::plan_measurement> measured = std::nullopt);
// Entries currently loaded from / stored to the file.
std::size_t stored_plan_count();

// A measured bytes-in-flight target (launchfit-calibrate) for this device's model, stored beside the plans
// under a reserved kernel key: this GPU's own first, then the newest of another GPU of the same model
// (unless cache_match::exact). nullopt without a cache file or a calibration.
std::optional<std::size_t> find_calibration(const device_limits& dev, int driver_version);
// Records one (nothing in frozen mode); written with the plans.
void store_calibration(const device_limits& dev, int driver_version, std::size_t bytes_in_flight_per_sm);

namespace detail {

// Looks at the open file for another process's changes now, as the background check does every second,
// and waits at most max_wait_ms for the loaded table to be refreshed. False when no file is open for
// reading and writing (a frozen file is never refreshed: every rank of a job keeps the plans it opened) or
// the refresh took longer.
bool refresh_cache_file(unsigned max_wait_ms);

}  // namespace detail
}  // namespace launchfit

// SPDX-License-Identifier: MIT
#pragma once
// Internal to the planner: the steps build_entry() (planner.cpp) calls in order, each in the file that owns
// its job. planner_query.cpp: the kernel, the query and its occupancy oracles; planner_tuning.cpp: tuning
// trials; planner_stored.cpp: a stored plan or the policy's; planner_requirements.cpp: what the launch
// requires of the plan and of the function; planner_report.cpp: the plan's warnings, log line and listeners.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan_file_format.hpp"
#include "planner.hpp"
#include "tuning_lease.hpp"
#include "tuning_record.hpp"

namespace launchfit::detail::planning {

// ---- step 1: the kernel (planner_query.cpp) ---------------------------------------------------------------

// A kernel family's members, resolved in this context: the policy chooses among their blocks.
struct family_members {
  std::vector<int> blocks;
  std::vector<CUfunction> functions;
  std::vector<kernel_resources> kernels;
  int index_of(int block) const noexcept {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] == block) return static_cast<int>(i);
    return -1;
  }
};

// The request's function (or, for a family, every member's) resolved in this context, with its resources.
void resolve_kernel(const launch_request& r, plan_entry& e, family_members& fam);

// ---- step 3: the query (planner_query.cpp) ----------------------------------------------------------------

// The occupancy oracle for f: the offline calculator while it agrees with the driver, else the driver.
// `driver_only`: never the calculator below the function's smem limit (trials, checks after a raise).
std::function<int(int, std::size_t)> driver_oracle(CUfunction f, const device_limits& dev,
                                                   const kernel_resources& k, bool driver_only = false);
// Whether the driver confirms the residency p was validated with; false (and the calculator withdrawn, said
// once in a warning) when it does not.
bool driver_confirms(CUfunction f, const device_limits& dev, const kernel_resources& k, const plan& p);
// Clusters of `need.cluster` co-resident on the device (cuOccupancyMaxActiveClusters), scaled from
// `device_sms` to an SM budget of `budget_sms`; -1 for blocks above `smem_limit` (the driver counts none there),
// 0 where the driver does not answer. Empty where the driver has no such entry point.
std::function<int(int, std::size_t)> cluster_oracle(CUfunction f, const launch_requirements& need,
                                                    std::size_t smem_limit, int device_sms, int budget_sms);
// The query `chosen` answers: the device (within an SM budget), the kernel, the rules, the oracles; the plan
// file's measured bytes in flight per SM only for a policy that may read them (bytes_in_flight, and any policy
// launchfit does not ship).
query make_query(const launch_request& r, const plan_entry& e, const device_limits& dev,
                 const launch_requirements& need, const family_members& fam, const policy& chosen);
// The member the policy chose replaces the planning stand-in; the plan is validated against its limits.
void choose_member(query& q, plan_entry& e, const family_members& fam);

// ---- step 4: tuning trials (planner_tuning.cpp) -----------------------------------------------------------

// What a plan made inside a stream capture says of its missing trials (the query's no_trials).
inline constexpr std::string_view capture_prevents_trials =
    "not tuned: the launch is being captured into a CUDA graph (or the driver could not tell whether it is), "
    "where no trial can run; it runs this static plan until launchfit::tune_graph() tunes the instantiated "
    "graph in place, or a launch outside a capture tunes it";

// Gives q a time_plan for a re-runnable spec (inside a stream capture, one that answers "cannot run" and notes
// it in `record`: the launch is tuned later); `asked` is set where plan_for() was asked for a trial. Every
// trial is noted in `record` (its timing, and the GPU's conditions before the first).
void offer_tuning(query& q, const launch_request& r, const plan_entry& e, const launch_requirements& need,
                  const family_members& fam, const std::shared_ptr<std::atomic<bool>>& asked,
                  const std::shared_ptr<tuning_record>& record);

// ---- step 5: a stored plan, or the policy's (planner_stored.cpp) ------------------------------------------

// What stored_or_chosen() keeps back for the plan store's layers (and the tuning lease it publishes under)
// until every later step accepted the plan: a plan refused after it (its family member, its smem limit, its
// cluster size) is neither written nor published; its lease is released unpublished.
class plan_to_store {
 public:
  // Writes the plan to the store's layers (when there is one to write) and publishes it under the lease.
  void commit();

 private:
  friend plan stored_or_chosen(const launch_request&, const plan_key&, std::uint64_t, const policy&,
                               const query&, const launch_requirements&, plan_entry&, const device_limits&,
                               const family_members&, bool, const std::atomic<bool>&, tuning_record&,
                               plan_to_store&);
  std::optional<stored_key> key_;
  plan plan_;
  std::optional<plan_measurement> measured_;
  std::optional<tuning_lease> lease_;
};

// The plan store's checked entry for this launch, else the policy's choice (kept in `pending` to be stored
// when `may_store` and no trial was refused). A tuned plan is stored with its measurement from `record`.
plan stored_or_chosen(const launch_request& r, const plan_key& key, std::uint64_t bucket,
                      const policy& chosen, const query& q, const launch_requirements& need, plan_entry& e,
                      const device_limits& dev, const family_members& fam, bool may_store,
                      const std::atomic<bool>& asked, tuning_record& record, plan_to_store& pending);

// ---- what the launch requires of the function (planner_requirements.cpp) ----------------------------------

// Allows a non-portable cluster size where the launch does; throws above the device's own maximum.
void allow_cluster_size(const launch_requirements& need, const plan_entry& e, const family_members& fam);
// Throws where the plan's clusters cannot co-schedule (cuOccupancyMaxPotentialClusterSize).
void check_cluster_size(const launch_requirements& need, const plan_entry& e);
// The function's dynamic-smem limit raised to `needed`, never lowered while a plan or trial needs it; returns
// the limit in force. `pending`: a plan still being checked (smem_need gives it back if refused).
std::size_t raise_function_smem_limit(CUfunction f, std::size_t needed, const kernel_resources& k,
                                      const plan& p, bool pending = false);
// A plan's need of its function's smem limit while the plan is still being checked: kept (keep()) once every
// step accepted it, else given back when this goes out of scope, the limit lowered to what is still needed.
class smem_need {
 public:
  smem_need() = default;
  smem_need(const smem_need&) = delete;
  smem_need& operator=(const smem_need&) = delete;
  ~smem_need();
  void hold(CUfunction f, std::size_t needed) noexcept {
    f_ = f;
    needed_ = needed;
  }
  void keep() noexcept;

 private:
  CUfunction f_ = nullptr;
  std::size_t needed_ = 0;
};
// The limit a plan is chosen at: each function's dynamic-smem limit as the program left it, read under the
// registry's lock (into e and fam). Where launchfit raised it for another plan (a plan of the same function under
// another key, or before cache().clear()), that raise is not counted: a plan is what a fresh process plans, and
// no give-back ever lowers the limit below the program's.
void read_program_smem_limits(plan_entry& e, family_members& fam);

// Step 6: the limit raised to the launched plan's smem and the plan validated again with the driver (its
// residency and its clusters at the raised limit). `need` holds the raise until the plan is kept.
void raise_smem_limit(const query& q, plan_entry& e, smem_need& need);

// ---- steps 7-8: what is said about the plan (planner_report.cpp) ------------------------------------------

// Adds one sentence to what the plan's line warns about (logged once, with the plan).
void add_warning(plan& p, const std::string& sentence);
// What the plan's line says about the launch beyond the policy: a PDL kernel that never waits, an SM
// budget, co-resident clusters.
void add_launch_notes(plan_entry& e, const launch_request& r, const query& q, const device_limits& dev,
                      const launch_requirements& need);
// A plan without work is being made (before its entry is published): from then on, launches with work look
// for one under their kernel and policy.
void note_planned_without_work() noexcept;
// Warns where the same spec without work was planned with another block (see planner_report.cpp).
void warn_if_planned_without_work(const launch_request& r, const plan_key& key, const policy& chosen,
                                  plan& p);
// Step 7: the plan's log line, once.
void report(plan_entry& e, const device_limits& dev, const launch_request& r, const family_members& fam);
// Step 8: the NVTX range name and the plan listeners.
void observe(plan_entry& e, const device_limits& dev, const launch_request& r);

}  // namespace launchfit::detail::planning

// SPDX-License-Identifier: MIT
// The miss path, as steps: resolve the kernel -> the policy that decides -> the query -> a stored or
// chosen plan -> what the launch requires -> the function's smem limit -> report. Each step is a function;
// build_entry() reads them top to bottom.

#include "planner.hpp"
#include "ptx_scan.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "driver.hpp"
#include "fault.hpp"
#include "launch_config.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"
#include "observe_internal.hpp"
#include "policy_string.hpp"
#include "remote_store.hpp"
#include "text.hpp"
#include "tuning.hpp"

namespace launchfit::detail {

std::atomic<int> calculator_skew_for_tests{0};

namespace {

// ---- step 1: the kernel ----------------------------------------------------------------------------------

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

void resolve_kernel(const launch_request& r, plan_entry& e, family_members& fam) {
  if (r.family) {
    // Planned with the member of the largest block (the query's launch bounds cover every member); the
    // chosen member replaces it in choose_member().
    std::size_t widest = 0;
    for (std::size_t i = 0; i < r.family_size; ++i) {
      fam.blocks.push_back(r.family[i].block);
      fam.functions.push_back(r.resolve(r.family[i].stub));
      fam.kernels.push_back(query_resources(fam.functions.back(), false));
      if (r.family[i].block > r.family[widest].block) widest = i;
    }
    e.function = fam.functions[widest];
    e.kernel = fam.kernels[widest];
    return;
  }
  e.function = r.resolve ? r.resolve(r.stub) : r.driver_kernel->function();
  e.kernel = query_resources(e.function, false);  // the readable name only where it is shown
  if (r.driver_kernel) e.param_sizes = query_param_sizes(e.function);
}

void describe_device(const device_limits& dev, plan_entry& e) {
  e.device_name = dev.name;
  e.device_uuid = dev.uuid;
  e.device_ordinal = dev.ordinal;
  e.max_grid_x = dev.max_grid_dim[0] > 0 ? dev.max_grid_dim[0] : 2147483647;
}

// ---- step 2: the policy that decides ---------------------------------------------------------------------

// An operator's LAUNCHFIT_POLICY override wins over the code's. The kernel's name is demangled only where it
// is used: overrides match it, the log line shows it, a plugin or registered policy may read it.
std::shared_ptr<const policy> override_for(plan_entry& e, std::string& glob) {
  if (!policy_overrides_configured()) return nullptr;
  return policy_override_for(name_kernel(e.kernel), &glob);
}

// ---- step 3: the query -----------------------------------------------------------------------------------

// Whether the offline calculator has agreed with the driver on every plan checked in this process. A policy
// asks the residency of tens of candidate blocks per plan, and a driver call for each made most of a first
// launch's planning time; the calculator answers them, and the chosen block's residency is then asked of the
// driver (calculator_agrees). The first disagreement is said in a warning and the driver answers every
// candidate from then on, so a calculator that is wrong for some GPU costs time, never a wrong plan.
std::atomic<bool> calculator_trusted{true};

int calculated_blocks(const device_limits& dev, const kernel_resources& k, int block, std::size_t smem) {
  try {
    const int n = occupancy(dev, k, block, smem).active_blocks_per_sm;
    return n > 0 ? n + calculator_skew_for_tests.load(std::memory_order_relaxed) : n;
  } catch (const error&) {
    return 0;  // impossible configuration
  }
}

// The occupancy oracle: the calculator while it is trusted (see above), else the driver, which counts nothing
// as resident above the function's current dynamic-smem limit. Candidates above that limit are answered by the
// calculator (it agrees with the driver once the limit is raised): probing never changes the user's function
// attributes; only the launched plan's smem is set, in raise_smem_limit(). `driver_only`: never the
// calculator below the limit (the check after the limit is raised).
std::function<int(int, std::size_t)> driver_oracle(CUfunction f, const device_limits& dev, const kernel_resources& k,
                                                   bool driver_only = false) {
  struct memo {
    std::mutex m;  // a plugin may call the oracle from several threads
    std::array<long long, 3> last{-1, -1, 0};  // block, smem, active blocks (the driver's)
  };
  return [f, &dev, k, driver_only, st = std::make_shared<memo>()](int block, std::size_t smem) {
    if (smem > k.max_dynamic_smem_bytes || (!driver_only && calculator_trusted.load(std::memory_order_relaxed)))
      return calculated_blocks(dev, k, block, smem);
    std::lock_guard<std::mutex> lock(st->m);
    auto& last = st->last;
    if (last[0] == block && last[1] == static_cast<long long>(smem)) return static_cast<int>(last[2]);
    int n = 0;
    if (driver().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block, smem,
                                                                            CU_OCCUPANCY_DEFAULT) != CUDA_SUCCESS) {
      return 0;
    }
    last = {block, static_cast<long long>(smem), n};
    return n;
  };
}

// The plan's residency (what its validation was answered, by the calculator or the driver) asked of the
// driver for its block: false when they differ (the calculator is then no longer trusted, said once in a
// warning). Whatever the trust was while the policy ran (another thread may have withdrawn it meanwhile),
// no plan is kept with a residency the driver did not confirm. True where the driver cannot be asked yet
// (above the function's smem limit: raise_smem_limit() validates with the driver once it is raised).
bool driver_confirms(CUfunction f, const device_limits& dev, const kernel_resources& k, const plan& p) {
  const int block = p.block_threads;
  const std::size_t smem = p.dynamic_smem_bytes;
  if (block <= 0 || smem > k.max_dynamic_smem_bytes) return true;
  int n = 0;
  if (driver().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block, smem, CU_OCCUPANCY_DEFAULT) !=
      CUDA_SUCCESS)
    return true;  // the launch reports what the driver refuses
  if (n == p.occupancy.active_blocks_per_sm) return true;
  if (calculator_trusted.exchange(false)) {
    logger()->warn("occupancy calculator disagrees with the driver for {} (block {}, {} B dynamic smem: driver {} "
                   "blocks/SM, calculator {}); the driver answers every candidate block from now on",
                   display_name(k), block, smem, n, calculated_blocks(dev, k, block, smem));
  }
  return false;
}

// Clusters co-resident on the device (cuOccupancyMaxActiveClusters), scaled to an SM budget. Above the
// function's current dynamic-smem limit the driver counts nothing: the query then estimates.
std::function<int(int, std::size_t)> cluster_oracle(CUfunction f, const launch_requirements& need,
                                                    std::size_t smem_limit, int device_sms, int budget_sms) {
  if (!driver().cuOccupancyMaxActiveClusters) return {};
  return [f, c = need.cluster, from_kernel = need.cluster_from_kernel, cooperative = need.cooperative, smem_limit,
          device_sms, budget_sms](int block, std::size_t smem) {
    if (smem > smem_limit) return -1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = c.x;
    cfg.gridDimY = c.y;
    cfg.gridDimZ = c.z;
    cfg.blockDimX = static_cast<unsigned>(block);
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = static_cast<unsigned>(smem);
    CUlaunchAttribute a{};
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = c.x;
    a.value.clusterDim.y = c.y;
    a.value.clusterDim.z = c.z;
    if (!from_kernel) {
      cfg.attrs = &a;
      cfg.numAttrs = 1;
    }
    int n = 0;
    if (cooperative) {
      // Asked as it will launch: a cooperative cluster launch may co-reside fewer clusters. A driver that does
      // not take the attribute here is asked without it.
      CUlaunchAttribute both[2] = {a, CUlaunchAttribute{}};
      both[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      both[1].value.cooperative = 1;
      CUlaunchConfig coop = cfg;
      coop.attrs = from_kernel ? &both[1] : both;
      coop.numAttrs = from_kernel ? 1 : 2;
      if (driver().cuOccupancyMaxActiveClusters(&n, f, &coop) != CUDA_SUCCESS &&
          driver().cuOccupancyMaxActiveClusters(&n, f, &cfg) != CUDA_SUCCESS)
        return 0;
    } else if (driver().cuOccupancyMaxActiveClusters(&n, f, &cfg) != CUDA_SUCCESS) {
      return 0;
    }
    if (budget_sms < device_sms && device_sms > 0) n = static_cast<int>(static_cast<long long>(n) * budget_sms / device_sms);
    return n;
  };
}

query make_query(const launch_request& r, const plan_entry& e, const device_limits& dev, const launch_requirements& need,
                 const family_members& fam) {
  query q;
  q.device = dev;
  if (r.options.sm_budget > 0 && r.options.sm_budget < dev.sm_count) q.device.sm_count = r.options.sm_budget;
  q.kernel = e.kernel;
  q.dynamic_smem_bytes = r.options.smem_bytes;
  if (r.smem_fn) q.smem_per_block = *r.smem_fn;
  q.work_hint = r.shape;
  q.blocks = r.blocks;
  q.shape_rule = r.shape_rule;
  q.cluster = need.cluster;
  q.bytes_in_flight_per_sm = default_bytes_in_flight_per_sm(dev);
  if (cache_file_open() && !bytes_in_flight_overridden(dev.cc())) {
    if (const auto measured = find_calibration(dev, driver().version)) q.bytes_in_flight_per_sm = *measured;
  }
  if (fam.blocks.empty()) {
    q.active_blocks = driver_oracle(e.function, dev, e.kernel);  // dev lives as long as the process
    if (need.cluster.count() > 1) {
      auto clusters = cluster_oracle(e.function, need, e.kernel.max_dynamic_smem_bytes, dev.sm_count, q.device.sm_count);
      if (clusters) {
        // Estimated (from the blocks per SM) where the driver cannot answer yet: above the smem limit.
        q.active_clusters = [clusters, est = q](int block, std::size_t smem) mutable {
          const int n = clusters(block, smem);
          if (n >= 0) return n;
          est.active_clusters = nullptr;
          return est.active_clusters_for(block);
        };
      }
    }
    return q;
  }
  // A family: each block is its member's, asked of that member; other blocks are not allowed.
  block_rule members = block_rule::one_of({});
  members.invalid = false;
  for (int b : fam.blocks)
    if (r.blocks.allows(b) && (r.shape_rule.is_default() || r.shape_rule.allows(b)) && members.count < 16)
      members.values[members.count++] = static_cast<std::uint16_t>(b);
  if (members.count == 0) {
    throw error(
        errc::invalid_policy, "launchfit::family",
        "no member of the family has a block the launch's block rule (" + r.blocks.to_string() + ") allows",
        display_name(e.kernel));
  }
  q.blocks = members;
  std::vector<std::function<int(int, std::size_t)>> oracles;
  std::vector<std::function<int(int, std::size_t)>> cluster_oracles;
  for (std::size_t i = 0; i < fam.blocks.size(); ++i) {
    oracles.push_back(driver_oracle(fam.functions[i], dev, fam.kernels[i], true));
    if (need.cluster.count() > 1)
      cluster_oracles.push_back(cluster_oracle(fam.functions[i], need, fam.kernels[i].max_dynamic_smem_bytes,
                                               dev.sm_count, q.device.sm_count));
  }
  q.active_blocks = [oracles, blocks = fam.blocks](int block, std::size_t smem) {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] == block) return oracles[i](block, smem);
    return 0;
  };
  if (need.cluster.count() > 1) {
    q.active_clusters = [cluster_oracles, blocks = fam.blocks](int block, std::size_t smem) {
      for (std::size_t i = 0; i < blocks.size(); ++i)
        if (blocks[i] == block && cluster_oracles[i]) return std::max(cluster_oracles[i](block, smem), 0);
      return 0;
    };
  }
  return q;
}

// The member the policy chose: its function and resources replace the planning stand-in, and the plan is
// validated against that member's own limits.
void choose_member(query& q, plan_entry& e, const family_members& fam) {
  if (fam.blocks.empty()) return;
  const int i = fam.index_of(e.plan.block_threads);
  if (i < 0) {
    throw error(errc::invalid_plan, "launchfit::family",
                "the plan's block " + std::to_string(e.plan.block_threads) + " is no member's",
                display_name(e.kernel), e.plan.to_string());
  }
  e.function = fam.functions[static_cast<std::size_t>(i)];
  e.kernel = fam.kernels[static_cast<std::size_t>(i)];
  q.kernel = e.kernel;
  const std::string reason = e.plan.reason;
  try {
    validate_plan(q, e.plan);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  std::string list;
  for (int b : fam.blocks) list += (list.empty() ? "" : ",") + std::to_string(b);
  e.plan.reason = reason + "; the family's member for block " + std::to_string(e.plan.block_threads) + " (of " + list + ")";
}

// Cluster sizes: above 8 blocks only when the launch allows non-portable sizes (which sets the kernel's
// attribute, before any residency is asked), and never above what cuOccupancyMaxPotentialClusterSize says
// co-schedules for the chosen block.
void allow_cluster_size(const launch_requirements& need, const plan_entry& e, const family_members& fam) {
  const unsigned long long size = need.cluster.count();
  if (size <= 8) return;
  if (!need.non_portable_cluster) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "cluster " + need.cluster.to_string() + " (" + std::to_string(size) +
                    " blocks) is above the portable maximum of 8: allow it with cluster(dims, true)",
                display_name(e.kernel));
  }
  const driver_api& d = driver();
  auto allow = [&](CUfunction f) {
    check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", display_name(e.kernel));
  };
  if (fam.functions.empty()) {
    allow(e.function);
  } else {
    for (CUfunction f : fam.functions) allow(f);
  }
  // The device's own maximum (16 blocks on an H200), asked for the smallest block so that only the hardware
  // binds: above it no block size or smem co-schedules, and the message says the number, not "no plan".
  if (!d.cuOccupancyMaxPotentialClusterSize) return;
  CUlaunchConfig cfg{};
  cfg.gridDimX = need.cluster.x;
  cfg.gridDimY = need.cluster.y;
  cfg.gridDimZ = need.cluster.z;
  cfg.blockDimX = 32;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  int most = 0;
  const CUfunction f = fam.functions.empty() ? e.function : fam.functions.front();
  if (d.cuOccupancyMaxPotentialClusterSize(&most, f, &cfg) != CUDA_SUCCESS || most <= 0) return;
  if (size > static_cast<unsigned long long>(most)) {
    throw error(errc::cluster, "plan(cluster)",
                "cluster " + need.cluster.to_string() + " (" + std::to_string(size) +
                    " blocks) is above the most this device co-schedules in one cluster: " + std::to_string(most) +
                    " blocks (its non-portable maximum, cuOccupancyMaxPotentialClusterSize; 8 is portable)",
                display_name(e.kernel));
  }
}

void check_cluster_size(const launch_requirements& need, const plan_entry& e) {
  const unsigned long long size = need.cluster.count();
  if (size <= 1 || !driver().cuOccupancyMaxPotentialClusterSize) return;
  CUlaunchConfig cfg{};
  cfg.gridDimX = need.cluster.x;
  cfg.gridDimY = need.cluster.y;
  cfg.gridDimZ = need.cluster.z;
  cfg.blockDimX = e.plan.block.x;
  cfg.blockDimY = e.plan.block.y;
  cfg.blockDimZ = e.plan.block.z;
  cfg.sharedMemBytes = static_cast<unsigned>(e.plan.dynamic_smem_bytes);
  int most = 0;
  if (driver().cuOccupancyMaxPotentialClusterSize(&most, e.function, &cfg) != CUDA_SUCCESS) return;
  if (most > 0 && size > static_cast<unsigned long long>(most)) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "cluster " + need.cluster.to_string() + " (" + std::to_string(size) + " blocks of " +
                    std::to_string(e.plan.block_threads) + " threads, " +
                    std::to_string(e.plan.dynamic_smem_bytes) + " B dynamic smem): at most " +
                    std::to_string(most) + " co-schedule (cuOccupancyMaxPotentialClusterSize)",
                display_name(e.kernel), e.plan.to_string());
  }
}

// The function's dynamic-smem limit raised to `needed` (a launched plan or a tuning trial), never lowered (a
// user's higher setting stays). Returns the limit now in force.
std::size_t raise_function_smem_limit(CUfunction f, std::size_t needed, const kernel_resources& k, const plan& p) {
  static std::mutex& m = *new std::mutex();  // never destroyed, as every launchfit singleton
  const driver_api& d = driver();
  std::lock_guard<std::mutex> lock(m);
  int current = 0;
  check(d.cuFuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", display_name(k), p.to_string());
  if (static_cast<std::size_t>(current) >= needed) return static_cast<std::size_t>(current);
  check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(needed)),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", display_name(k), p.to_string());
  return needed;
}

// ---- step 4: tuning trials -------------------------------------------------------------------------------

// Trials re-run the kernel: only when the spec allows it, with real arguments, outside a stream capture.
// Every trial launches as the launch requires (a grid.sync() kernel is never timed non-cooperatively).
// plan_for() has no arguments to time with: a policy that asks for a trial there is told no and `asked` is set,
// so the caller refuses instead of answering with a plan the first launch would not run.
void offer_tuning(query& q, const launch_request& r, const plan_entry& e, const launch_requirements& need,
                  const family_members& fam, const std::shared_ptr<std::atomic<bool>>& asked) {
  if (!r.rerunnable) return;
  const driver_api& d = driver();
  // Any doubt (no entry point, an error such as the legacy stream while another stream captures) is a no.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!d.cuStreamIsCapturing || d.cuStreamIsCapturing(r.stream, &capturing) != CUDA_SUCCESS) return;
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) return;
  // Trials launch what they are validated for: the driver answers their residency (a trial costs far more
  // than its calls), not the calculator.
  if (fam.blocks.empty() && e.function) q.active_blocks = driver_oracle(e.function, q.device, q.kernel, true);
  if (!r.has_arguments) {
    q.time_plan = [asked](const plan&) -> double {
      asked->store(true, std::memory_order_relaxed);
      throw error(errc::not_planned_yet, "time_plan", "plan_for() has no kernel arguments to time a trial with");
    };
    return;
  }
  // One stream gate per tuning (a pinned word and a watchdog thread), made by the first trial. The trials
  // share the launch's stream: a plugin that times from several threads is served one trial at a time.
  struct tuning {
    std::mutex m;
    std::optional<stream_gate> gate;
  };
  q.time_plan = [f = e.function, &r, max_grid_x = e.max_grid_x, need, q_for_checks = q, fam,
                 t = std::make_shared<tuning>()](const plan& candidate) {
    plan p = candidate;
    apply_requirements(q_for_checks, p, need);  // throws: this candidate cannot run as required
    CUfunction run = f;
    kernel_resources k = q_for_checks.kernel;
    if (!fam.blocks.empty()) {  // a family: the member written for this block
      const int i = fam.index_of(p.block_threads);
      if (i < 0)
        throw error(errc::invalid_plan, "time_plan", "no family member for this block", {}, p.to_string());
      run = fam.functions[static_cast<std::size_t>(i)];
      k = fam.kernels[static_cast<std::size_t>(i)];
    }
    raise_function_smem_limit(run, p.dynamic_smem_bytes, k, p);  // as its real launch would
    std::lock_guard<std::mutex> lock(t->m);
    if (!t->gate) t->gate.emplace();
    if (r.bind) r.bind(r.bind_self, p);  // from_plan() arguments for this candidate
    return time_candidate(run, r, p, need, max_grid_x, *t->gate);
  };
}

// ---- step 5: a stored plan, or the policy's ---------------------------------------------------------------

std::string smem_rule_text(const launch_request& r, const plan_key& key) {
  if (r.smem_fn) return "fn=" + std::to_string(key.smem_rule);
  return "bytes=" + std::to_string(r.options.smem_bytes);
}

// `calculated`: the query's oracle is the calculator's (not a family's, whose members the driver answers).
plan choose(const policy& chosen, const query& q, plan_entry& e, bool calculated) {
  try {
    plan p = chosen.choose(q);
    if (calculated && e.function && !driver_confirms(e.function, q.device, q.kernel, p))
      p = chosen.choose(q);  // again, with the driver answering every candidate
    return p;
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
}

// What, besides the policy, decides the plan: part of the cache file's key.
std::string decided_by_text(const std::string& policy_text, const launch_request& r, const query& q,
                            const launch_requirements& need, const family_members& fam) {
  std::string s = policy_text + key_text(need);
  if (!r.blocks.is_any()) s += " blocks=" + r.blocks.to_string();
  if (r.shape.rank >= 2) s += " rows=32";
  if (r.shape_rule.is_set()) s += " shape=" + r.shape_rule.to_string();
  if (q.device.sm_count > 0 && r.options.sm_budget > 0 && r.options.sm_budget <= q.device.sm_count)
    s += " sms=" + std::to_string(q.device.sm_count);
  if (r.options.waves != 0 && r.shape.kind == work::shape::grid_stride) s += " waves=" + std::to_string(r.options.waves);
  if (!fam.blocks.empty()) {
    s += " family=";
    for (std::size_t i = 0; i < fam.blocks.size(); ++i)
      s += (i ? "," : "") + std::to_string(fam.blocks[i]) + ":" + kernel_fingerprint(fam.kernels[i]);
  }
  return s;
}

// `may_store`: the plan is the one a launch caches (not one made for this call only, nor one a plan_for() that
// was asked for a trial will refuse): only such a plan is written to the store's layers, where the first
// writer wins for the whole fleet.
plan stored_or_chosen(const launch_request& r, const plan_key& key, const policy& chosen, const query& q,
                      const launch_requirements& need, plan_entry& e, const device_limits& dev,
                      const family_members& fam, bool may_store, const std::atomic<bool>& asked) {
  // The plan store's layers (the local file, the remote store) are asked only when one is in use.
  if (!cache_file_open() && !remote_layer()) {
    plan p = choose(chosen, q, e, fam.blocks.empty());
    apply_requirements(q, p, need);
    return p;
  }
  // The cache file's key strings are built only when one is in use (a miss stays cheap without).
  const std::string policy_text = chosen.to_string();
  const stored_key sk = stored_key_for(dev, driver().version, e.kernel, decided_by_text(policy_text, r, q, need, fam),
                                        smem_rule_text(r, key), key.bucket);
  std::optional<plan> stored = find_stored_plan(sk, true);
  // A plan for another size bucket beats a guess when this launch may not be tuned (not rerunnable).
  if (!stored && key.bucket != 0 && !q.time_plan) stored = find_stored_plan(sk, false);
  // A deterministic built-in policy is cheap to ask: its answer checks the stored plan.
  std::optional<plan> computed;
  if (!stored || is_builtin_policy(chosen)) {
    computed = choose(chosen, q, e, fam.blocks.empty());
    apply_requirements(q, *computed, need);
  }
  if (stored) {
    // The match level the reader found (never text from the file): this GPU or its model, this bucket or not.
    const std::string match = stored->match;
    std::string problem;
    bool differs_only = false;
    try {
      // A stored plan is validated against the driver's residency (the query's oracle may be the calculator,
      // and no policy's choice passed through driver_confirms() here).
      query checked = q;
      if (fam.blocks.empty() && e.function) checked.active_blocks = driver_oracle(e.function, q.device, q.kernel, true);
      problem = check_stored_plan(checked, *stored, need, computed ? &*computed : nullptr, &differs_only);
    } catch (const error& bad) {
      problem = bad.message();
    }
    if (problem.empty()) {
      stored->policy = policy_text;  // who decided is the key's policy, never the file's text
      stored->match = match;
      return *stored;
    }
    logger()->warn("{} entry for {} ignored ({}); computing a new plan",
                   match.compare(0, 6, "remote") == 0 ? "remote plan store" : "plan cache file",
                   display_name(e.kernel), escape_text(problem));
    if (!computed) {
      computed = choose(chosen, q, e, fam.blocks.empty());
      apply_requirements(q, *computed, need);
    }
    // A broken entry is replaced; a valid one that another process's view chose is not: processes that
    // disagree on it (another bytes-in-flight target, another version) would otherwise overwrite each other's
    // entry and make each other plan again, forever.
    if (differs_only) return *computed;
  }
  if (may_store && !asked.load(std::memory_order_relaxed)) store_plan(sk, *computed);
  return *computed;
}

// ---- step 6: the function's dynamic-smem limit -----------------------------------------------------------

// Raised to what the launched plan needs, never lowered (a user's higher setting stays), and checked with the
// driver afterwards: the plan's residency came from the calculator above the old limit.
void raise_smem_limit(const query& q, plan_entry& e) {
  if (e.plan.dynamic_smem_bytes <= e.kernel.max_dynamic_smem_bytes) return;
  e.kernel.max_dynamic_smem_bytes = raise_function_smem_limit(e.function, e.plan.dynamic_smem_bytes, e.kernel, e.plan);
  query checked = q;
  checked.kernel.max_dynamic_smem_bytes = e.kernel.max_dynamic_smem_bytes;
  checked.active_blocks = driver_oracle(e.function, q.device, checked.kernel, true);
  const std::string reason = e.plan.reason;
  try {
    validate_plan(checked, e.plan);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  e.plan.reason = reason;
}

// ---- step 7: report --------------------------------------------------------------------------------------

// The report copies the plan and kernel: only when something will be logged (info, or a warning).
void report(plan_entry& e, const device_limits& dev, const launch_request& r, const family_members& fam) {
  const spdlog::logger& l = logger_fast();
  const bool warns = !e.plan.warning.empty() || e.kernel.local_bytes_per_thread > 0;
  if (!l.should_log(spdlog::level::info) && !(warns && l.should_log(spdlog::level::warn))) return;
  if (warns) name_kernel(e.kernel);  // else the new plan's line demangles the name where it is made
  log_new_plan(plan_report{e.kernel, dev.name, dev.ordinal, dev.cc(), e.plan, r.shape, e.override_glob, dev.sm_count,
                           static_cast<int>(fam.blocks.size())});
}

// ---- step 8: listeners and NVTX ---------------------------------------------------------------------------

void observe(plan_entry& e, const device_limits& dev, const launch_request& r) {
  if (nvtx_on()) e.nvtx = nvtx_name_for(name_kernel(e.kernel), e.plan, grid_rule_text(e.plan, r.shape));
  if (!listeners_active()) return;
  plan_event ev;
  ev.what = e.plan.trials > 0 ? plan_event::kind::tuned : plan_event::kind::new_plan;
  ev.kernel = name_kernel(e.kernel);
  ev.device = dev.name;
  ev.device_uuid = dev.uuid;
  ev.device_ordinal = dev.ordinal;
  ev.plan = &e.plan;
  ev.first_work = r.shape;
  ev.override_glob = e.override_glob;
  notify_plan(ev);
}

// The steps, top to bottom. `decided_by` is an override's policy when building under its route; null: the
// spec's policy, or an override found now (then the entry only routes).
plan_entry build_entry(const launch_request& r, const context_ref& ctx, const plan_key& key,
                       std::shared_ptr<const policy> decided_by, const std::string& glob, bool may_tune) {
  // A policy, plugin or reset callback that launches its own kernel plans again inside this build: bounded.
  thread_local int depth = 0;
  struct nested {
    int& d;
    ~nested() { --d; }
  } nesting{++depth};
  if (depth > 4) {
    throw error(
        errc::invalid_policy, "launchfit::launch",
        "planning recursed more than 4 levels deep (a policy, plugin or reset callback that launches while "
        "it is planning)");
  }
  plan_entry e;
  e.key = key;
  family_members fam;
  resolve_kernel(r, e, fam);
  const device_limits& dev = limits_for(ctx);
  describe_device(dev, e);

  e.override_glob = glob;
  // A plan launched verbatim (planned(p)) was made under the overrides already: none replaces it.
  if (!decided_by && !dynamic_cast<const planned_policy*>(r.policy)) {
    std::shared_ptr<const policy> over = override_for(e, e.override_glob);
    if (over && over->hash() != r.policy_hash) {
      e.route = std::move(over);  // planned under the override's own key and size bucket: follow_route()
      e.route_hash = e.route->hash();
      return e;
    }
  }
  e.overriding = decided_by;
  const policy& chosen = decided_by ? *decided_by : *r.policy;
  if (!e.override_glob.empty() || !is_builtin_policy(chosen)) name_kernel(e.kernel);

  launch_requirements need = requirements_of(r);
  require_pdl_support(need, e.kernel);
  for (const kernel_resources& member : fam.kernels) require_pdl_support(need, member);
  try {
    require_kernel_cluster(need, e.kernel);
  } catch (const error& bad) {
    throw bad.with_kernel(display_name(e.kernel));
  }
  allow_cluster_size(need, e, fam);
  e.options = need;  // the launch's attributes: from here to CUlaunchConfig, whatever the plan's source
  query q = make_query(r, e, dev, need, fam);
  const auto asked = std::make_shared<std::atomic<bool>>(false);
  if (may_tune) offer_tuning(q, r, e, need, fam, asked);
  e.plan = stored_or_chosen(r, key, chosen, q, need, e, dev, fam, may_tune, *asked);
  if (asked->load(std::memory_order_relaxed)) {
    // The plan contract: plan_for() answers only with what the launch will run, and this launch is tuned on
    // its first run (nothing stored for it yet). Nothing is cached: the first launch tunes.
    throw error(errc::not_planned_yet, "launchfit::plan_for",
                "policy " + escape_text(chosen.to_string()) +
                    " times candidate plans on the first launch of this rerunnable spec, and no tuned plan is stored "
                    "for it yet: launch it first (then plan_for() answers with the tuned plan), or compute "
                    "block-dependent arguments with from_plan()",
                display_name(e.kernel));
  }
  if (e.plan.cooperative != need.cooperative || e.plan.programmatic != need.programmatic ||
      (need.has_cluster() ? e.plan.cluster != need.cluster : e.plan.cluster.count() > 1)) {
    throw error(errc::internal, "launchfit::launch", "the plan's launch options differ from the launch's",
                display_name(e.kernel), e.plan.to_string());
  }
  choose_member(q, e, fam);
  check_cluster_size(need, e);
  if (need.programmatic && kernel_waits(r.kernel_id) == false) {
    // Logged once, with the plan: the kernel may be meant to overlap without reading its predecessor's output.
    if (!e.plan.warning.empty()) e.plan.warning += "; ";
    e.plan.warning +=
        "launched with .pdl() but its PTX never executes griddepcontrol.wait (cudaGridDependencySynchronize): it "
        "starts before the previous kernel in the stream ends and nothing makes it wait for that kernel's output";
  }
  if (q.device.sm_count < dev.sm_count)
    e.plan.reason += "; sized for an SM budget of " + std::to_string(q.device.sm_count) + " of " +
                     std::to_string(dev.sm_count) + " SMs";
  if (e.plan.resident_clusters > 0)
    e.plan.reason += "; " + std::to_string(e.plan.resident_clusters) + " clusters of " +
                     std::to_string(e.plan.cluster.count()) + " co-reside";
  raise_smem_limit(q, e);
  report(e, dev, r, fam);
  observe(e, dev, r);
  return e;
}

// Builds under key once across threads; a request asked again from inside its own build is planned
// without tuning into `local`.
const plan_entry& plan_once(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            const std::shared_ptr<const policy>& decided_by, const std::string& glob,
                            std::optional<plan_entry>& local) {
  try {
    if (const plan_entry* e = find_or_build(key, [&] { return build_entry(r, ctx, key, decided_by, glob, true); }))
      return *e;
    local.emplace(build_entry(r, ctx, key, decided_by, glob, false));
    return *local;
  } catch (const error& e) {
    throw with_fault_note(e);
  }
}

}  // namespace

bool calculator_trusted_now() noexcept { return calculator_trusted.load(std::memory_order_relaxed); }

// ---- the miss path ---------------------------------------------------------------------------------------

const plan_entry& plan_miss(const launch_request& r, const context_ref& ctx, const plan_key& key,
                            std::optional<plan_entry>& local) {
  note_context(ctx);
  return plan_once(r, ctx, key, nullptr, {}, local);
}

const plan_entry& follow_route(const launch_request& r, const context_ref& ctx, const plan_entry& route,
                               std::optional<plan_entry>& local) {
  plan_key key = route.key;
  key.policy = route.route_hash;
  key.bucket = plan_bucket(route.route->work_bucket(r.shape), r.shape, r.shape_rule);
  key.launch |= overridden_bit;
  if (const plan_entry* hit = find(key)) return *hit;
  const std::shared_ptr<const policy> decided_by = route.route;  // `route` may be `local`, rebuilt below
  const std::string glob = route.override_glob;
  return plan_once(r, ctx, key, decided_by, glob, local);
}

const plan_entry& replan_for_smem_rule(const launch_request& r, const context_ref& ctx, const plan_entry& stale,
                                       std::optional<plan_entry>& local) {
  const std::shared_ptr<const policy> decided_by = stale.overriding;
  const std::string glob = stale.override_glob;
  plan_key key = stale.key;
  int block = stale.plan.block_threads;
  // Keyed by the rule's answer at the block the previous plan chose; a few steps settle any set of rules that
  // differ by captured values. A rule that answers differently on every call never settles: planned per launch.
  constexpr int max_steps = 4;
  for (int step = 0; step < max_steps; ++step) {
    key.smem_rule = hash_combine(key.smem_rule, (*r.smem_fn)(block) + 1);
    const plan_entry* e = find(key);
    if (!e) e = &plan_once(r, ctx, key, decided_by, glob, local);
    if (e->route) e = &follow_route(r, ctx, *e, local);  // overrides changed meanwhile
    if ((*r.smem_fn)(e->plan.block_threads) == e->plan.dynamic_smem_bytes) return *e;
    if (local && e == &*local) break;  // planned for this call only, and the rule moved again
    block = e->plan.block_threads;
  }
  try {
    local.emplace(build_entry(r, ctx, key, decided_by, glob, false));
  } catch (const error& e) {
    throw with_fault_note(e);
  }
  const std::size_t again = (*r.smem_fn)(local->plan.block_threads);
  if (again != local->plan.dynamic_smem_bytes) {
    throw error(errc::invalid_plan, "smem_per_block",
                "the smem_per_block rule gave " + std::to_string(local->plan.dynamic_smem_bytes) +
                    " B and then " + std::to_string(again) + " B for a block of " +
                    std::to_string(local->plan.block_threads) +
                    " threads: a rule must give the same bytes for the same block",
                display_name(local->kernel), local->plan.to_string());
  }
  return *local;
}

// ---- pure steps ------------------------------------------------------------------------------------------

launch_requirements requirements_of(const launch_request& r) {
  return launch_options_of(r);
}

void require_pdl_support(const launch_requirements& need, const kernel_resources& k) {
  if (!need.programmatic || k.ptx_version == 0 || k.ptx_version >= 90) return;
  // griddepcontrol.wait (cudaGridDependencySynchronize) exists from PTX for sm_90 on: code compiled for an
  // older virtual architecture has none (library kernels guard it with __CUDA_ARCH__ >= 900), also once the
  // driver JIT-compiles it for sm_90 (the binary version then reads 90, the PTX version stays). Launched
  // early, such a kernel reads its predecessor's output before it is written.
  throw error(errc::pdl_unsupported, "plan(pdl)",
              "the kernel was compiled from PTX for compute_" + std::to_string(k.ptx_version) +
                  " (binary version " + std::to_string(k.binary_version) +
                  "), which has no griddepcontrol.wait (cudaGridDependencySynchronize needs compute_90 or later): "
                  "launched with .pdl() it could read the previous kernel's output before it is written. Build "
                  "it for sm_90 (e.g. -gencode arch=compute_90,code=sm_90) or launch it without .pdl()",
              display_name(k));
}

void require_kernel_cluster(launch_requirements& need, const kernel_resources& k) {
  if (k.required_cluster[0] == 0) return;
  const dims compiled{k.required_cluster[0], std::max(k.required_cluster[1], 1u), std::max(k.required_cluster[2], 1u)};
  if (compiled.count() <= 1) return;
  if (need.cluster.count() > 1 && need.cluster != compiled) {
    throw error(CUDA_ERROR_INVALID_CLUSTER_SIZE, "plan(cluster)",
                "the kernel's __cluster_dims__ are " + compiled.to_string() +
                    ", the launch asks for cluster " + need.cluster.to_string(),
                display_name(k));
  }
  need.cluster = compiled;
  need.cluster_from_kernel = true;
}

void apply_requirements(const query& q, plan& p, const launch_requirements& need) {
  bool changed = false;
  if (need.cluster.count() > 1 || p.cluster.count() > 1) {
    if (p.cluster.count() > 1 && p.cluster != need.cluster) {
      throw error(errc::invalid_plan, "plan(cluster)",
                  "policy " + escape_text(p.policy) + " chose cluster " + p.cluster.to_string() +
                      " but the launch " +
                      (need.cluster.count() > 1 ? "requires cluster " + need.cluster.to_string()
                                                : std::string("asked for no cluster")),
                  q.kernel.demangled, p.to_string());
    }
    changed = changed || p.cluster != need.cluster || p.resident_clusters == 0;
    p.cluster = need.cluster;
  }
  p.cluster_from_kernel = need.cluster_from_kernel;
  // A cooperative grid co-resides: never the full grid (a tuner may offer it to any grid_stride launch).
  if (need.cooperative) p.full_grid = false;
  // Options are the launch's, decided once from the spec: a policy, override or plugin that adds one is
  // refused, never launched with it nor silently stripped of it.
  if (p.programmatic && !need.programmatic) {
    throw error(errc::invalid_plan, "plan(pdl)",
                "policy " + escape_text(p.policy) +
                    " chose a programmatic dependent launch (PDL) but the launch does not ask for one (.pdl())",
                q.kernel.demangled, p.to_string());
  }
  if (p.cooperative && !need.cooperative) {
    throw error(errc::invalid_plan, "plan(cooperative)",
                "policy " + escape_text(p.policy) +
                    " chose a cooperative launch but the launch does not require one (cooperative() or "
                    ".cooperative())",
                q.kernel.demangled, p.to_string());
  }
  if (p.programmatic != need.programmatic) {
    p.programmatic = need.programmatic;
    changed = true;
  }
  const dims before = p.block;
  shape_block(q, p);
  // A block shape is checked (and carried, for the grid's rows per thread) on every plan, a trial's too.
  changed = changed || p.block != before || p.shape_rule != q.shape_rule;
  const bool made_cooperative = need.cooperative && !p.cooperative;
  if (made_cooperative) p.cooperative = true;
  if (changed || made_cooperative) validate_plan(q, p);  // co-residency, resident clusters, the device's limits
  if (made_cooperative) p.reason += "; launched cooperatively, as the launch requires";
}

bool same_launch(const plan& a, const plan& b) noexcept {
  return a.block == b.block && a.grid == b.grid && a.blocks_per_sm == b.blocks_per_sm &&
         a.shape_rule == b.shape_rule && a.dynamic_smem_bytes == b.dynamic_smem_bytes &&
         a.cooperative == b.cooperative && a.cluster == b.cluster && a.programmatic == b.programmatic &&
         a.sm_count == b.sm_count && a.full_grid == b.full_grid;
}

std::string check_stored_plan(const query& q, plan& stored, const launch_requirements& need, const plan* computed,
                              bool* differs_only) {
  if (stored.cooperative != need.cooperative) {
    return std::string("the stored plan is ") + (stored.cooperative ? "" : "not ") + "cooperative, the launch " +
           (need.cooperative ? "is" : "is not");
  }
  if (stored.cluster != need.cluster && !(stored.cluster.count() <= 1 && need.cluster.count() <= 1)) {
    return "the stored plan has cluster " + stored.cluster.to_string() + ", the launch " +
           (need.cluster.count() > 1 ? "requires " + need.cluster.to_string() : std::string("has none"));
  }
  if (stored.programmatic != need.programmatic) {
    return std::string("the stored plan is ") + (stored.programmatic ? "" : "not ") +
           "a programmatic dependent launch, the launch " + (need.programmatic ? "is" : "is not");
  }
  if (!computed) {
    // Tuning policies and plugins size 1-D blocks (shaped in rows of 32 for multi-dimensional work), or their
    // own 2-D block where the launch leaves the shape free, and grids from the work; a fixed grid or another
    // block shape from a file could leave most of the work undone.
    if (stored.grid.x != 0 || !launch_makes_block(q, stored.block)) {
      return "the stored plan has a fixed grid or a block shape this launch does not make (" + stored.to_string() +
             ")";
    }
  }
  stored.cluster = need.cluster;
  stored.cluster_from_kernel = need.cluster_from_kernel;
  const std::size_t stored_smem = stored.dynamic_smem_bytes;
  validate_plan(q, stored);  // throws: block, smem, grid or co-residency out of bounds
  if (stored.dynamic_smem_bytes != stored_smem) {
    return "the stored plan has " + std::to_string(stored_smem) + " B of dynamic smem where the launch's rule gives " +
           std::to_string(stored.dynamic_smem_bytes) + " B";
  }
  if (computed && !same_launch(stored, *computed)) {
    if (differs_only) *differs_only = true;
    return "the stored plan (" + stored.to_string() + ") is not what " + escape_text(computed->policy) +
           " chooses now (" + computed->to_string() + ")";
  }
  const bool remote = stored.match.compare(0, 6, "remote") == 0;
  stored.reason = (remote ? "stored in the remote plan store: " : "stored in the plan-cache file: ") +
                  escape_text(stored.reason);
  stored.warning = escape_text(stored.warning);
  return {};
}

}  // namespace launchfit::detail

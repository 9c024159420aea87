// SPDX-License-Identifier: MIT
// The plugin C ABI's structs (launchfit/plugin.h): the query, device, kernel and plan a plugin reads, the
// plan it returns checked for what only the C struct can get wrong, and the callbacks it calls (nothing
// throws across the C boundary).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "launchfit/error.hpp"
#include "log_internal.hpp"
#include "plan_json.hpp"
#include "plugin_internal.hpp"

namespace launchfit::detail::plugin_internal {

namespace {

// A zeroed ABI struct stamped with its size and this build's ABI version, which the plugin checks first.
template <class C>
C abi_struct() {
  C c{};
  c.struct_size = sizeof c;
  c.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
  return c;
}

// Callbacks: `ctx` is the C++ query; nothing may throw across the C boundary, and a plugin's null `ctx` or
// plan is answered as a refusal (0, SIZE_MAX, -1), never dereferenced.
int active_blocks_cb(void* ctx, int block_threads, size_t dynamic_smem_bytes) {
  if (!ctx) return 0;
  const auto& q = *static_cast<const query*>(ctx);
  try {
    if (block_threads <= 0 || block_threads > q.max_block_threads()) return 0;
    if (!q.allows(block_threads)) return 0;  // the launch's block rule: never a candidate, never a trial
    if (q.active_blocks) return q.active_blocks(block_threads, dynamic_smem_bytes);
    return occupancy(q.device, q.kernel, block_threads, dynamic_smem_bytes).active_blocks_per_sm;
  } catch (...) {
    return 0;
  }
}

size_t smem_for_block_cb(void* ctx, int block_threads) {
  if (!ctx) return SIZE_MAX;
  try {
    return static_cast<const query*>(ctx)->smem_for(block_threads);
  } catch (...) {
    return SIZE_MAX;
  }
}

double time_plan_cb(void* ctx, const launchfit_plan* c) {
  if (!ctx || !c) return -1;
  const auto& q = *static_cast<const query*>(ctx);
  try {
    plan p = from_c(*c, q);
    check_plugin_plan(q, p);  // as the plugin's chosen plan: a trial runs nothing its plan could not
    shape_block(q, p);  // a 1-D candidate in the launch's block shape, as its launch would run it
    validate_plan(q, p);
    return q.time_plan(p);
  } catch (...) {
    return -1;
  }
}

double setup_ms_cb(void* ctx) {
  if (!ctx) return 0.0;
  const auto& q = *static_cast<const query*>(ctx);
  try {
    return q.setup_ms ? q.setup_ms() : 0.0;
  } catch (...) {
    return 0.0;
  }
}

}  // namespace

std::string plugin_text(const char* buf, std::size_t size, const char* otherwise) {
  const std::size_t n = buf ? strnlen(buf, size) : 0;
  if (n == 0) return otherwise;
  return detail::escape_text(std::string_view(buf, n), text_cap_bytes);
}

launchfit_device to_c(const device_limits& d) {
  auto c = abi_struct<launchfit_device>();
  c.name = d.name.c_str();
  c.uuid = d.uuid.c_str();
  c.cc_major = d.cc_major;
  c.cc_minor = d.cc_minor;
  c.sm_count = d.sm_count;
  c.regs_per_sm = d.regs_per_sm;
  c.regs_per_block = d.regs_per_block;
  c.max_regs_per_thread = d.max_regs_per_thread;
  c.max_threads_per_sm = d.max_threads_per_sm;
  c.max_warps_per_sm = d.max_warps_per_sm;
  c.max_blocks_per_sm = d.max_blocks_per_sm;
  c.max_threads_per_block = d.max_threads_per_block;
  c.warp_size = d.warp_size;
  c.smem_per_sm_bytes = d.smem_per_sm_bytes;
  c.smem_per_block_bytes = d.smem_per_block_bytes;
  c.smem_per_block_optin_bytes = d.smem_per_block_optin_bytes;
  c.smem_reserved_per_block_bytes = d.smem_reserved_per_block_bytes;
  for (int i = 0; i < 3; ++i) {
    c.max_block_dim[i] = d.max_block_dim[i];
    c.max_grid_dim[i] = d.max_grid_dim[i];
  }
  c.l2_bytes = d.l2_bytes;
  c.peak_bandwidth_bytes_per_s = d.peak_bandwidth_bytes_per_s();
  c.cooperative_launch = d.cooperative_launch;
  c.cluster_launch = d.cluster_launch;
  return c;
}

launchfit_kernel to_c(const kernel_resources& k) {
  auto c = abi_struct<launchfit_kernel>();
  c.name = k.name.c_str();
  c.demangled = k.demangled.c_str();
  c.regs_per_thread = k.regs_per_thread;
  c.max_threads_per_block = k.max_threads_per_block;
  c.static_smem_bytes = k.static_smem_bytes;
  c.local_bytes_per_thread = k.local_bytes_per_thread;
  c.const_bytes = k.const_bytes;
  c.max_dynamic_smem_bytes = k.max_dynamic_smem_bytes;
  c.ptx_version = k.ptx_version;
  c.binary_version = k.binary_version;
  return c;
}

launchfit_plan to_c(const plan& p) {
  auto c = abi_struct<launchfit_plan>();
  c.block_x = p.block.x;
  c.block_y = p.block.y;
  c.block_z = p.block.z;
  c.blocks_per_sm = p.blocks_per_sm;
  c.dynamic_smem_bytes = p.dynamic_smem_bytes;
  c.grid_x = p.grid.x;
  c.grid_y = p.grid.y;
  c.grid_z = p.grid.z;
  c.cooperative = p.options.cooperative;
  c.full_grid = p.full_grid ? 1 : 0;
  c.trials = p.trials;
  c.tuning_ms = p.tuning_ms;
  std::snprintf(c.reason, sizeof c.reason, "%s", p.reason.c_str());
  return c;
}

launchfit_plan blank_plan() {
  auto c = abi_struct<launchfit_plan>();
  c.dynamic_smem_bytes = LAUNCHFIT_SMEM_FROM_QUERY;
  c.block_y = c.block_z = c.grid_y = c.grid_z = 1;
  return c;
}

// Throws launchfit::error (LAUNCHFIT_INVALID_PLAN) for what validate_plan() cannot see in a C++ plan: a
// negative blocks_per_sm, block dims whose product overflows, dynamic smem other than the launch's.
// Informational numbers are cleaned: negative trials and non-finite, negative or implausible (beyond the plan
// file's bound) times become 0.
plan from_c(const launchfit_plan& c, const query& q) {
  plan p;
  p.block = dims{c.block_x, c.block_y, c.block_z};
  p.blocks_per_sm = c.blocks_per_sm;
  p.grid = dims{c.grid_x, c.grid_x ? c.grid_y : 1, c.grid_x ? c.grid_z : 1};
  p.options.cooperative = c.cooperative != 0;
  p.full_grid = LAUNCHFIT_HAS_FIELD(&c, launchfit_plan, full_grid) && c.full_grid != 0;  // ABI 1.1
  p.trials = c.trials > 0 ? c.trials : 0;
  p.tuning_ms = std::isfinite(c.tuning_ms) && c.tuning_ms > 0 && c.tuning_ms <= detail::max_tuning_ms ? c.tuning_ms : 0;
  p.reason = plugin_text(c.reason, sizeof c.reason);
  if (c.blocks_per_sm < 0) {
    throw error(errc::invalid_plan, "validate(blocks_per_sm)",
                "blocks_per_sm " + std::to_string(c.blocks_per_sm) + " is negative (0: as many as fit)",
                q.kernel.demangled, p.to_string());
  }
  // x*y*z of three 32-bit numbers can wrap 64 bits back to a small, legal-looking count.
  const unsigned long long xy = static_cast<unsigned long long>(c.block_x) * c.block_y;
  if (c.block_z != 0 && xy > ~0ULL / c.block_z) {
    throw error(errc::invalid_plan, "validate(block)",
                "block " + std::to_string(c.block_x) + "x" + std::to_string(c.block_y) + "x" +
                    std::to_string(c.block_z) + " has more threads than any device allows",
                q.kernel.demangled, p.to_string());
  }
  const bool legal = p.block.count() > 0 && p.block.count() <= static_cast<unsigned>(q.max_block_threads());
  p.block_threads = legal ? static_cast<int>(p.block.count()) : 0;  // validation names the bad block
  p.dynamic_smem_bytes = legal ? q.smem_for(p.block_threads) : q.dynamic_smem_bytes;
  if (legal && c.dynamic_smem_bytes != LAUNCHFIT_SMEM_FROM_QUERY &&
      c.dynamic_smem_bytes != p.dynamic_smem_bytes) {
    throw error(errc::invalid_plan, "validate(smem)",
                "dynamic smem " + std::to_string(c.dynamic_smem_bytes) + " B differs from the launch's " +
                    std::to_string(p.dynamic_smem_bytes) + " B (leave LAUNCHFIT_SMEM_FROM_QUERY)",
                q.kernel.demangled, p.to_string());
  }
  return p;
}

// Items of the work in every dimension (saturating): what a plugin sizes and buckets by.
std::uint64_t total_items(const work& w) noexcept {
  if (w.rank <= 1) return w.n;
  std::uint64_t t = 0;
  const std::uint64_t z = w.rank >= 3 ? w.nz : 1;
  if (__builtin_mul_overflow(w.n, w.ny, &t) || __builtin_mul_overflow(t, z, &t)) return ~std::uint64_t{0};
  return t;
}

// A plugin's plan, its choice or a trial's: the grid of items work is computed per launch (one thread per
// item), so a fixed one would be launched for every n of the plan's bucket, leaving items undone or running
// billions of blocks for a few items (as the plan file refuses a stored one); its block is one the launch makes.
void check_plugin_plan(const query& q, const plan& p) {
  if (q.work_hint.kind == work::shape::items && p.grid.x != 0) {
    throw error(errc::invalid_plan, "plan(grid)",
                "a fixed grid " + p.grid.to_string() + " for " + detail::items_text(q.work_hint) +
                    ": the grid of items work is computed per launch, one thread per item",
                q.kernel.demangled, p.to_string());
  }
  check_own_shape(q, p);
}

// A plugin's block (a plan's or a trial's) of more than one row: the block the launch itself makes of that
// many threads, or, where the launch lets the block widen (block_x_free()), a wider 2-D block of the plugin's
// own; exactly what a stored plan of this launch may have (check_stored_plan).
void check_own_shape(const query& q, const plan& p) {
  if ((p.block.y == 1 && p.block.z == 1) || launch_makes_block(q, p.block)) return;
  throw error(errc::invalid_plan, "validate(block)",
              "block " + p.block.to_string() + " is not a block this launch makes (" +
                  launch_block(q, p.block.count()).to_string() +
                  (block_shape_free(q) ? ", or x a multiple of " + std::to_string(q.shape_rule.x_step()) +
                                             " with y >= 2 and z 1)"
                                       : "; a wider block needs 2-D work, a free y and z, and the spec's "
                                         "block_x_free())"),
              q.kernel.demangled, p.to_string());
}

launchfit_query to_c(const query& q, const launchfit_device& device, const launchfit_kernel& kernel) {
  auto cq = abi_struct<launchfit_query>();
  cq.device = &device;
  cq.kernel = &kernel;
  cq.dynamic_smem_bytes = q.dynamic_smem_bytes;
  cq.has_smem_rule = static_cast<bool>(q.smem_per_block);
  cq.max_block_threads = q.max_block_threads();
  cq.work_kind = static_cast<std::uint32_t>(q.work_hint.kind);
  cq.work_per_thread = q.work_hint.per_thread;
  cq.work_n = total_items(q.work_hint);  // every dimension of 2-D and 3-D work
  cq.work_rank = std::max<std::uint32_t>(q.work_hint.rank, 1);
  cq.block_shape_free = block_shape_free(q) ? 1 : 0;
  cq.work_nx = q.work_hint.n;
  cq.work_ny = q.work_hint.rank >= 2 ? q.work_hint.ny : 1;
  cq.work_nz = q.work_hint.rank >= 3 ? q.work_hint.nz : 1;
  cq.block_x_step = q.shape_rule.x_step();
  cq.bytes_in_flight_per_sm =
      q.bytes_in_flight_per_sm ? q.bytes_in_flight_per_sm : default_bytes_in_flight_per_sm(q.device);
  cq.ctx = const_cast<query*>(&q);  // the callbacks only call into it (its oracle is thread-safe)
  cq.active_blocks = active_blocks_cb;
  cq.smem_for_block = smem_for_block_cb;
  cq.time_plan = q.time_plan ? time_plan_cb : nullptr;
  cq.setup_ms = q.time_plan && q.setup_ms ? setup_ms_cb : nullptr;
  return cq;
}

}  // namespace launchfit::detail::plugin_internal

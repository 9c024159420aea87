// SPDX-License-Identifier: MIT
#include "launch_config.hpp"

#include <cstring>

#include "plan_cache.hpp"

namespace launchfit::detail {

void fill_launch_config(CUlaunchConfig& cfg, launch_attributes& attrs, const plan& p, dims grid, CUstream stream) {
  cfg = CUlaunchConfig{};
  cfg.gridDimX = grid.x;
  cfg.gridDimY = grid.y;
  cfg.gridDimZ = grid.z;
  cfg.blockDimX = p.block.x;
  cfg.blockDimY = p.block.y;
  cfg.blockDimZ = p.block.z;
  cfg.sharedMemBytes = static_cast<unsigned>(p.dynamic_smem_bytes);
  cfg.hStream = stream;
  const unsigned n = fill_launch_attributes(attrs, p.options);
  cfg.attrs = n ? attrs.data() : nullptr;
  cfg.numAttrs = n;
}

unsigned fill_launch_attributes(launch_attributes& attrs, const launch_options& o) noexcept {
  const dims cluster = o.cluster;
  unsigned n = 0;
  if (o.cooperative) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n].value.cooperative = 1;
    ++n;
  }
  if (cluster.count() > 1 && !o.cluster_from_kernel) {  // __cluster_dims__ kernels carry their own
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = cluster.x;
    attrs[n].value.clusterDim.y = cluster.y;
    attrs[n].value.clusterDim.z = cluster.z;
    ++n;
  }
  if (o.programmatic) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  return n;
}

// An entry made ready for the hit path (plan_cache.hpp).
void ready_for_hits(plan_entry& e) noexcept {
  e.ready = false;
  if (e.route || e.overriding || e.tuning_deferred || e.nvtx || !e.kept || !e.function) return;
  const plan& p = e.plan;
  launch_attributes attrs;
  fill_launch_config(e.ready_config, attrs, p, dims{0, 0, 0}, nullptr);
  // A launch with attributes points at its kept plan's (never freed, made from this plan): a hit copies no
  // attribute. A kept plan whose attributes are not these (made before the plan's last change) leaves every
  // launch of the entry to the full path, which marshals them anew.
  e.ready_config.attrs = nullptr;
  if (const unsigned n = e.ready_config.numAttrs; n != 0) {
    if (e.kept->num_attrs != n || std::memcmp(e.kept->attrs.data(), attrs.data(), n * sizeof(CUlaunchAttribute)) != 0)
      return;
    e.ready_config.attrs = const_cast<CUlaunchAttribute*>(e.kept->attrs.data());  // the driver only reads them
  }
  const launch_options& o = p.options;
  const int b = p.block_threads;
  // grid_for()'s first case, decided once: a computed grid of power-of-two blocks, nothing else to check.
  e.items_by_shift = p.grid.x == 0 && !p.without_work && b > 0 && (b & (b - 1)) == 0 && !o.cooperative &&
                     o.cluster.x <= 1 && !o.has_cluster() && p.shape_rule.is_default();
  e.items_shift = static_cast<std::uint8_t>(b > 0 ? __builtin_ctz(static_cast<unsigned>(b)) : 0);
  e.ready = true;
}

}  // namespace launchfit::detail

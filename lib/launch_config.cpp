// SPDX-License-Identifier: MIT
#include "launch_config.hpp"

namespace launchfit::detail {

void fill_launch_config(CUlaunchConfig& cfg, launch_attributes& attrs, const plan& p, dims grid, CUstream stream) {
  const launch_options& o = p.options;
  const dims cluster = o.cluster;
  cfg = CUlaunchConfig{};
  cfg.gridDimX = grid.x;
  cfg.gridDimY = grid.y;
  cfg.gridDimZ = grid.z;
  cfg.blockDimX = p.block.x;
  cfg.blockDimY = p.block.y;
  cfg.blockDimZ = p.block.z;
  cfg.sharedMemBytes = static_cast<unsigned>(p.dynamic_smem_bytes);
  cfg.hStream = stream;
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
  cfg.attrs = n ? attrs.data() : nullptr;
  cfg.numAttrs = n;
}

}  // namespace launchfit::detail

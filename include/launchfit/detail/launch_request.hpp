// SPDX-License-Identifier: MIT
#pragma once
// Internal: what launch() and plan_for() hand to the compiled library (one launch, everything but the
// kernel's argument values). Not part of the public API.

#include <cuda_runtime_api.h>  // cudaStream_t and cudaFunction_t: the driver's CUstream and CUfunction

#include <cstddef>
#include <cstdint>

#include "launchfit/detail/callable.hpp"
#include "launchfit/detail/plan_key_bits.hpp"
#include "launchfit/export.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/work.hpp"

namespace launchfit {
class policy;
class kernel;
struct plan;
}

namespace launchfit::detail {

// A block-size -> dynamic smem rule (smem_per_block) and a reset function (reset), as the spec holds them.
using smem_rule_fn = callable<std::size_t(int)>;
using reset_fn = callable<void()>;

using resolve_fn = cudaFunction_t (*)(const void* stub);  // a CUfunction

// One instantiation of a kernel family: the block it is written for and its host stub.
struct family_member {
  int block = 0;
  const void* stub = nullptr;
};

// The size bucket a plan is keyed by: the policy's (policy::work_bucket), and for 2-D and 3-D work whose
// block may widen (block_x_free()) the octave of its row width too, so a wide block chosen for one image is
// never taken for an image whose rows are less than half as wide (autotune widens to at most the largest power
// of two within a row, which every row of the same octave holds).
inline std::uint64_t plan_bucket(std::uint64_t policy_bucket, const work& w, const block_shape& s) noexcept {
  if (policy_bucket == 0 || !s.free_x || w.rank < 2) return policy_bucket;
  std::uint64_t octave = 1;
  for (std::uint64_t n = w.n; n > 1; n >>= 1) ++octave;
  return policy_bucket ^ (octave * 0x9e3779b97f4a7c15ULL);
}

// A copy of the spec's policy that the library owns, for a launch captured into a CUDA graph (tune_graph()
// plans it again after the launch has returned): made on that path only, never on a launch's hit path.
struct policy_copy {
  const launchfit::policy* policy = nullptr;
  void* owner = nullptr;                     // what holds it (the policy, or a shared_ptr to it)
  void (*free_owner)(void*) noexcept = nullptr;  // frees `owner`
};
using copy_policy_fn = policy_copy (*)(const void* holder);

// Where a kernel node goes instead of a launch (launchfit/graph.hpp): the graph, the node's dependencies, and
// the node made.
struct node_target {
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* dependencies = nullptr;
  std::size_t dependency_count = 0;
  cudaGraphNode_t node = nullptr;  // set by launch()
};

struct launch_request {
  std::uintptr_t kernel_id = 0;
  const void* stub = nullptr;       // runtime kernels
  resolve_fn resolve = nullptr;     // runtime kernels
  const launchfit::kernel* driver_kernel = nullptr;
  const launchfit::policy* policy = nullptr;
  const void* policy_holder = nullptr;  // the spec's policy as the spec holds it (a value or a pointer)
  copy_policy_fn copy_policy = nullptr;  // copies *policy_holder (null where the policy cannot be copied)
  std::uint64_t policy_hash = 0;
  std::uint64_t bucket = 0;
  const smem_rule_fn* smem_fn = nullptr;       // the rule options.smem_rule identifies, when it is set
  work shape{};                                // with options.waves (spec::work_shape())
  cudaStream_t stream = nullptr;  // a CUstream
  launch_options options{};   // what the launch requires, decided once in make_request(); no policy changes it
  block_rule blocks{};        // block sizes the kernel can run with
  block_shape shape_rule{};   // how the kernel needs its block shaped (block_y, x multiple, rows per thread)
  const family_member* family = nullptr;  // a kernel family: the policy chooses the member by its block
  std::size_t family_size = 0;
  // Arguments computed from the plan (lf::from_plan): fills them in for `p` before a launch or a trial.
  void (*bind)(void* self, const plan& p) = nullptr;
  void* bind_self = nullptr;
  void** args = nullptr;
  const std::size_t* arg_sizes = nullptr;
  std::size_t arg_count = 0;
  bool rerunnable = false;
  bool back_to_back = false;  // rerunnable() was given: trials may repeat the launch between resets
  const reset_fn* reset = nullptr;
  bool has_arguments = false;  // set by launch(): plan_for() has none, so it never offers tuning trials
  node_target* node = nullptr;  // add a kernel node to this graph instead of launching (add_kernel_node())
};

// What a launch of a kernel with its own arguments hands the library first: its plan key's parts (made where the
// spec is written, plan_key_bits.hpp: constants for a spec of constant options), the spec's work by address, the
// stream and the arguments; about a third of a launch_request, and all a launch that hits reads. Where it does not
// hit (a miss, or a plan that needs more than its ready launch configuration), `make` makes the spec's whole
// request (make_request()) and the launch takes the full path. Made by make_probe() alone, from a spec that
// outlives the launch.
struct launch_probe {
  std::uintptr_t kernel_id = 0;
  const void* stub = nullptr;       // runtime kernels
  resolve_fn resolve = nullptr;     // runtime kernels
  const launchfit::kernel* driver_kernel = nullptr;
  const launchfit::policy* policy = nullptr;
  std::uint64_t policy_hash = 0;
  std::uint64_t bucket = 0;
  std::uint64_t smem_identity = 0;  // launch_options::smem_identity()
  std::uint64_t launch_bits = 0;    // key_bits() of the spec's options, cooperative where the policy is
  std::uint64_t shape_bits = 0;     // shape_bits() of the spec's block rule, block shape, options and work
  cudaStream_t stream = nullptr;
  const work* shape = nullptr;  // the spec's work, less its waves cap (the options': `waves`)
  std::uint32_t waves = 0;
  // An smem rule (checked by value on every launch) or a cluster the key cannot hold (refused where planned):
  // the launch takes the full path.
  bool in_full = false;
  bool rerunnable = false;  // spec::is_rerunnable()
  void** args = nullptr;
  const std::size_t* arg_sizes = nullptr;
  std::size_t arg_count = 0;
  const void* spec = nullptr;
  // The spec's whole request, less kernel and arguments, with the probe's policy hash and bucket (the policy is
  // asked once a launch).
  launch_request (*make)(const void* spec, std::uint64_t policy_hash, std::uint64_t bucket) = nullptr;
};

// The cached plan for this request (computing, validating and logging it on a miss).
LAUNCHFIT_API const plan& plan_for(const launch_request& r);
// Plan lookup + grid arithmetic + cuLaunchKernelEx; what was launched.
LAUNCHFIT_API launched launch(const launch_request& r);
// The same for a probe: the hit path, else the probe's whole request launched as launch(r) launches it.
LAUNCHFIT_API launched launch(const launch_probe& p);

}  // namespace launchfit::detail

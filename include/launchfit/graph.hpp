// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief CUDA graphs: tune_graph() tunes a captured graph's kernel nodes in place, and add_kernel_node()
/// adds a kernel node from a spec, planned and logged as its launch would be.
///
// A launch captured into a graph (cudaStreamBeginCapture ... launchfit::launch ... cudaStreamEndCapture) cannot
// time candidate plans: the capture records the kernel, it does not run it. A tuning policy's launch first seen
// inside a capture therefore runs its static plan, says so in its plan's line, and is remembered with its
// arguments; once the graph is instantiated, tune_graph(graph, exec) tunes those kernels outside any capture
// and sets the executable graph's kernel nodes to the tuned plans (block, grid, dynamic smem), without
// instantiating it again. Tuned plans are cached, stored and published as any tuned plan is, so the next
// capture of the same kernels gets them directly.
//
//   cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
//   lf::launch(axpy, lf::use("autotune").items(n).on(s).rerunnable(), a, x, y, n);  // static plan, remembered
//   cudaStreamEndCapture(s, &graph);
//   cudaGraphInstantiate(&exec, graph, 0);
//   cudaGraphLaunch(exec, s);                             // once: every buffer holds what the graph makes
//   lf::graph_tuning t = lf::tune_graph(graph, exec, s);  // trials run on s; exec's nodes now tuned
//
// Trials run each kernel again on its captured arguments, on what the buffers hold when tune_graph() is
// called: replay the graph once first where a kernel reads what an earlier node writes (an index, a count).
// A node is tuned only where its spec allows re-running with .rerunnable() alone. Nodes whose spec restores
// data with .reset(f) (the callback cannot be called once the launch has returned), computes arguments from
// the plan (from_plan()) or does not allow re-running, and every node of a graph that allocates memory in its
// own nodes (cudaMallocAsync inside the capture: buffers that exist only while it runs), are left as they
// are and reported with the reason. (A spec that does not allow re-running, launched 64 times in a row
// outside any capture, stops asking about captures: a later capture's node of it is left but not reported.)

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "launchfit/base.hpp"
#include "launchfit/export.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch.hpp"

namespace launchfit {

/// What tune_graph() did with one kernel node launchfit remembered from a capture into the graph.
struct LAUNCHFIT_API graph_node_report {
  /// What became of the node.
  enum class outcome {
    tuned,      ///< planned again with trials; the node runs the tuned plan now (`after`)
    unchanged,  ///< its plan needs no trials (already tuned, stored, or its policy times nothing)
    left,       ///< not tuned, for the reason `why` (its spec does not allow re-running, its policy declined...)
  };
  cudaGraphNode_t node = nullptr;  ///< the node in the graph tune_graph() was given
  std::string kernel;              ///< the kernel's name
  std::string before;              ///< the plan the node ran with (plan::to_string())
  std::string after;               ///< the plan it runs with now (`before` where untouched)
  outcome result = outcome::unchanged;  ///< what became of it
  std::string why;  ///< why it was left or unchanged; empty for a tuned node
};

/// What tune_graph() did: a report per node launchfit remembered, the launches whose plans were made inside a
/// capture of this graph (a tuning policy's, or one of a policy that is not a built-in under a spec that does
/// not allow re-running). A launch whose plan was made before the capture runs that plan, as the policy chose
/// it outside any capture, and is not listed.
struct LAUNCHFIT_API graph_tuning {
  std::size_t tuned = 0;      ///< nodes set to a tuned plan
  std::size_t unchanged = 0;  ///< nodes whose plan needs no trials
  std::size_t left = 0;       ///< nodes that could not be tuned (see graph_node_report::why)
  /// Launches of this graph that would have been tuned but were forgotten (launchfit remembers 4096 launches
  /// inside captures at once, dropping the oldest): their nodes keep their static plans and are not listed.
  std::size_t forgotten = 0;
  std::vector<graph_node_report> nodes;  ///< one per node, in the graph's order (changed nodes first)
  /// One line per node: "tuned k: <before> -> <after>", "left k: <why>".
  std::string to_string() const;
};

/// Tunes, outside any capture, the kernels launchfit captured into `graph` with a plan that would have been
/// tuned, and sets `exec` (instantiated from `graph`, which must still exist) to the tuned plans in place:
/// cudaGraphExecKernelNodeSetParams, never a new instantiation; the graph's own nodes are updated too, so a
/// later instantiation runs them. Cooperative, cluster and programmatic (PDL) nodes keep their attributes and
/// edges. A node the CUDA driver refuses to update is reported as left with the driver's error, and the other
/// nodes are tuned: it keeps its captured plan in the executable graph and in the graph (an executable node
/// updated before the graph's node was refused is set back; where the driver refuses that too, the report
/// says so and its `after` is the tuned plan the executable graph then runs). Trials run on `stream` with the
/// captured arguments, on what the buffers hold now (replay the graph once first). Call it where the graph is
/// not running (trials and the update race a replay in flight), and not while another thread captures in
/// cudaStreamCaptureModeGlobal (trials allocate pinned memory and launch, which that mode forbids). With no
/// `stream` the trials run on the legacy default stream, which no thread may use while another thread captures
/// a blocking stream in any mode: give a stream made with cudaStreamNonBlocking where captures run beside it. A node
/// tuned already is reported unchanged; one whose plan another process of the fleet is tuning is left (call
/// again once it is published); so is one whose policy declines (its trials could not run), with the
/// policy's reason. Another executable graph of the same graph, given after the first was tuned, is set to the
/// tuned plans too; a clone of the graph, or a graph that embeds it as a child graph, has nodes of its own and
/// nothing remembered (tune the captured graph, then clone or embed it). A node is set to its captured
/// arguments and work with the tuned block, grid and smem: a graph node the program set to other parameters
/// since the capture (cudaGraphKernelNodeSetParams) is left and reported, but changes made to `exec`'s nodes
/// alone (cudaGraphExecKernelNodeSetParams, cudaGraphExecUpdate), which the CUDA driver gives no way to read,
/// are replaced: tune before making them. A node whose planning fails (a policy that throws) is left and
/// reported with the error, and the other nodes are tuned; a block size an smem rule throws for is one no tuned
/// plan chooses (the rule is asked at the capture for every size a policy may choose, below a warp too: a rule
/// for whole warps only throws for the others, never asserts or divides by t / 32). Throws launchfit::error for a null
/// graph or a driver without the graph entry points.
LAUNCHFIT_API graph_tuning tune_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream = nullptr);

/// The dependencies of a node add_kernel_node() adds: `{a, b}` (copied), or an array and its size (not
/// copied: valid for the call it is given to).
class node_dependencies {
 public:
  /// No dependency: a root node.
  node_dependencies() = default;
  /// The nodes listed (`{a, b}`): up to four held in place, more in an allocated list.
  node_dependencies(std::initializer_list<cudaGraphNode_t> nodes)  // NOLINT(google-explicit-constructor)
      : count_(nodes.size()) {
    if (count_ <= in_place_capacity) {
      std::size_t i = 0;
      for (cudaGraphNode_t n : nodes) in_place_[i++] = n;
    } else {
      list_.assign(nodes.begin(), nodes.end());
    }
  }
  /// `count` nodes from `nodes`.
  node_dependencies(const cudaGraphNode_t* nodes, std::size_t count) : nodes_(nodes), count_(count) {}
  /// The nodes.
  const cudaGraphNode_t* data() const noexcept {
    return nodes_ ? nodes_ : count_ <= in_place_capacity ? in_place_ : list_.data();
  }
  /// How many.
  std::size_t size() const noexcept { return count_; }

 private:
  static constexpr std::size_t in_place_capacity = 4;
  cudaGraphNode_t in_place_[in_place_capacity] = {};  // a node's usual few dependencies: no allocation
  std::vector<cudaGraphNode_t> list_;                 // more than in_place_capacity
  const cudaGraphNode_t* nodes_ = nullptr;            // given as an array: not copied
  std::size_t count_ = 0;
};

/// A kernel node add_kernel_node() added, and the plan it runs.
struct kernel_node {
  cudaGraphNode_t node = nullptr;  ///< null where the work was empty (no node is added)
  launched what;                   ///< grid, block, dynamic smem and plan, as launch() returns them
};

namespace detail {
// Adds the node `go` plans (launch_runtime() or launch_driver() with r.node set) instead of launching it.
template <class Go>
kernel_node add_node(launch_request& r, cudaGraph_t graph, const node_dependencies& deps, Go&& go) {
  node_target target;
  target.graph = graph;
  target.dependencies = deps.data();
  target.dependency_count = deps.size();
  r.node = &target;
  kernel_node out;
  out.what = go();
  out.node = target.node;
  return out;
}
}  // namespace detail

/// Adds to `graph` a kernel node of runtime-API kernel `k` as launch(k, s, args...) would launch it: planned
/// (and logged) by the spec's policy, with the plan's block, grid and dynamic smem, cooperative and cluster
/// attributes, and for a `.pdl()` spec programmatic edges from `deps` (the kernel may start while they finish;
/// each dependency must then be a kernel node). The arguments are copied into the node. A tuning policy times
/// its candidates on the spec's stream first, as a launch would (the spec must allow re-running); where that
/// stream is being captured the node gets the static plan and is remembered, so tune_graph() of `graph` tunes it.
template <class... Params, class Policy, class... Args>
kernel_node add_kernel_node(cudaGraph_t graph, const node_dependencies& deps, void (*k)(Params...),
                            const spec<Policy>& s, Args... args) {
  if (!k) detail::throw_null_kernel("launchfit::add_kernel_node");
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
  r.stub = reinterpret_cast<const void*>(k);
  return detail::add_node(r, graph, deps, [&] { return detail::launch_runtime<Params...>(r, std::forward<Args>(args)...); });
}

/// The same for a driver-API kernel (each argument one kernel parameter, as launch() passes them). Arguments
/// are taken by value here too, as launch() takes them (an array argument is the pointer it decays to).
template <class Policy, class... Args>
kernel_node add_kernel_node(cudaGraph_t graph, const node_dependencies& deps, const kernel& k, const spec<Policy>& s,
                            Args... args) {
  detail::launch_request r = detail::make_request(s);
  return detail::add_node(r, graph, deps, [&] { return detail::launch_driver(r, k, std::forward<Args>(args)...); });
}

}  // namespace launchfit

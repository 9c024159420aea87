// SPDX-License-Identifier: MIT
// CUDA graphs (launchfit/graph.hpp): launches inside a stream capture remembered for tune_graph(), which
// tunes them outside the capture and sets the instantiated graph's nodes in place, and kernel nodes from specs.

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "device_query.hpp"
#include "driver.hpp"
#include "graph_capture.hpp"
#include "launch_config.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "text.hpp"

namespace launchfit::detail {
namespace {

// Launches remembered at most: a program that captures without ever tuning keeps this much (each one a copy
// of its arguments, a few hundred bytes), and is told once when more are left out.
constexpr std::size_t max_captured_launches = 1 << 16;
// An smem rule is asked at the capture for every block size (its callable may not outlive the launch).
constexpr int max_block_threads = 1024;

// One launch inside a capture, with everything its request needs to be planned again after the launch has
// returned: owned copies of the policy, the kernel, the family, the smem rule's answers and the arguments.
struct captured_launch {
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  std::uint64_t context_id = 0;
  CUfunction function = nullptr;  // what the node runs now
  std::string kernel;             // its name
  std::string plan_text;          // the plan the node runs now
  bool deferred = false;          // its policy asked for trials the capture did not allow
  std::string left;               // why it cannot be tuned in place; empty: it can

  std::shared_ptr<const policy> owned_policy;
  std::optional<launchfit::kernel> driver_kernel;
  std::vector<family_member> family;
  std::vector<std::size_t> smem_answers;  // the smem rule's answer per block size (index: threads)
  smem_rule_fn smem;                      // answers from smem_answers
  std::vector<std::max_align_t> arg_storage;
  std::vector<void*> arg_ptrs;
  std::vector<std::size_t> arg_sizes;
  launch_request request;  // pointers into the members above; stream, node and bind unset
};

struct captures {
  std::mutex m;
  std::map<std::pair<CUgraph, CUgraphNode>, std::shared_ptr<captured_launch>> by_node;
  bool told_full = false;
};

captures& the_captures() {
  static captures& c = *[] {
    auto* made = new captures;  // never destroyed: a launch may run while statics are destroyed at exit
    lifecycle::on_fork({[] { the_captures().m.lock(); }, [] { the_captures().m.unlock(); },
                        [] {
                          lifecycle::abandoned_in_child(&the_captures().m);
                          new (&the_captures().m) std::mutex;
                        }});
    return made;
  }();
  return c;
}

// Why a launch cannot be tuned once it has returned; empty: it can.
std::string why_not_tunable_later(const launch_request& r) {
  if (!r.rerunnable)
    return "its spec does not allow re-running (.rerunnable()), so its policy cannot time candidates on it";
  if (r.reset)
    return "its spec restores the kernel's data with .reset(f) between runs, which cannot be called after the "
           "launch has returned (give .rerunnable() alone where re-running is harmless)";
  if (r.bind)
    return "it computes arguments from the plan (from_plan()), which cannot be computed again after the "
           "launch has returned";
  if (!r.arg_sizes || (r.arg_count > 0 && !r.args)) return "the sizes of its arguments are unknown";
  if (!r.copy_policy || !r.policy_holder) return "its policy cannot be copied";
  return {};
}

// The launch's request with owned copies of what it points to (the policy, the kernel, the arguments...);
// false where the policy cannot be copied (a policy type without a copy constructor).
bool copy_request(const launch_request& r, captured_launch& c) {
  c.request = r;
  c.request.stream = nullptr;
  c.request.node = nullptr;
  c.request.bind = nullptr;
  c.request.bind_self = nullptr;
  c.request.reset = nullptr;
  const policy_copy pc = r.copy_policy(r.policy_holder);
  if (!pc.policy) return false;
  c.owned_policy = std::shared_ptr<const policy>(pc.policy, [owner = pc.owner, free = pc.free_owner](
                                                                const policy*) noexcept { free(owner); });
  c.request.policy = c.owned_policy.get();
  c.request.policy_holder = nullptr;
  c.request.copy_policy = nullptr;
  if (r.driver_kernel) {
    c.driver_kernel = *r.driver_kernel;
    c.request.driver_kernel = &*c.driver_kernel;
  }
  if (r.family && r.family_size) {
    c.family.assign(r.family, r.family + r.family_size);
    c.request.family = c.family.data();
  }
  if (r.smem_fn) {
    c.smem_answers.resize(max_block_threads + 1);
    for (int t = 1; t <= max_block_threads; ++t) c.smem_answers[static_cast<std::size_t>(t)] = (*r.smem_fn)(t);
    const std::vector<std::size_t>* answers = &c.smem_answers;
    c.smem = [answers](int t) {
      return t >= 1 && t <= max_block_threads ? (*answers)[static_cast<std::size_t>(t)] : std::size_t{0};
    };
    c.request.smem_fn = &c.smem;
  }
  std::size_t words = 0;
  std::vector<std::size_t> offsets(r.arg_count);
  for (std::size_t i = 0; i < r.arg_count; ++i) {
    offsets[i] = words;
    words += (r.arg_sizes[i] + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  }
  c.arg_storage.resize(std::max<std::size_t>(words, 1));
  c.arg_ptrs.resize(r.arg_count + 1, nullptr);
  c.arg_sizes.assign(r.arg_sizes, r.arg_sizes + r.arg_count);
  for (std::size_t i = 0; i < r.arg_count; ++i) {
    void* to = &c.arg_storage[offsets[i]];
    std::memcpy(to, r.args[i], r.arg_sizes[i]);
    c.arg_ptrs[i] = to;
  }
  c.request.args = c.arg_ptrs.data();
  c.request.arg_sizes = c.arg_sizes.data();
  return true;
}

// Whether `node` of `graph` is still the node `c` remembers: a kernel node of the graph, running c's function
// on c's arguments (a handle of a graph destroyed since may have been given to another).
bool still_the_node(const captured_launch& c, const std::set<CUgraphNode>& nodes) {
  const driver_api& d = driver();
  if (!nodes.count(c.node)) return false;
  CUgraphNodeType type{};
  if (d.cuGraphNodeGetType(c.node, &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL) return false;
  CUDA_KERNEL_NODE_PARAMS p{};
  if (d.cuGraphKernelNodeGetParams(c.node, &p) != CUDA_SUCCESS || p.func != c.function) return false;
  if (c.arg_sizes.empty()) return true;
  if (!p.kernelParams) return false;
  for (std::size_t i = 0; i < c.arg_sizes.size(); ++i) {
    if (!p.kernelParams[i] || std::memcmp(p.kernelParams[i], c.arg_ptrs[i], c.arg_sizes[i]) != 0) return false;
  }
  return true;
}



}  // namespace

bool stream_capturing(CUstream stream) noexcept {
  const driver_api* d = nullptr;
  try {
    d = &driver();
  } catch (...) {
    return false;
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!d->cuStreamIsCapturing || d->cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS) return false;
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

void note_captured_launch(const launch_request& r, const plan_entry& e, dims grid) noexcept {
  (void)grid;
  try {
    const driver_api& d = driver();
    if (!d.cuStreamGetCaptureInfo) return;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph graph = nullptr;
    const CUgraphNode* deps = nullptr;
    const CUgraphEdgeData* edges = nullptr;
    std::size_t n = 0;
    if (d.cuStreamGetCaptureInfo(r.stream, &status, &id, &graph, &deps, &edges, &n) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
      return;  // launched outside a capture
    // The launch just captured is the stream's one dependency now: the node it made.
    if (n != 1 || !deps || !graph) {
      logger()->debug("launch of {} inside a capture: its node cannot be told ({} dependencies); "
                      "tune_graph() will not see it", display_name(e.kernel), n);
      return;
    }
    auto c = std::make_shared<captured_launch>();
    c->graph = graph;
    c->node = deps[0];
    c->function = e.function;
    c->kernel = display_name(e.kernel);
    c->plan_text = e.plan.to_string();
    c->deferred = e.tuning_deferred;
    c->context_id = e.key.context;
    c->left = why_not_tunable_later(r);
    if (c->left.empty() && !copy_request(r, *c))
      c->left = "its policy cannot be copied (a policy type without a copy constructor), so it cannot be "
                "planned again after the launch has returned";
    captures& all = the_captures();
    std::lock_guard<std::mutex> lock(all.m);
    const auto key = std::make_pair(c->graph, c->node);
    if (all.by_node.size() >= max_captured_launches && !all.by_node.count(key)) {
      if (!all.told_full) {
        all.told_full = true;
        logger()->warn("{} launches inside stream captures are remembered for tune_graph() already: later ones "
                       "(from {} on) are not, and their graphs' nodes keep their static plans",
                       max_captured_launches, escape_text(c->kernel));
      }
      return;
    }
    all.by_node[key] = std::move(c);
  } catch (...) {
    // Out of memory or a driver without graphs: this launch stays out of tune_graph(); the launch itself ran.
  }
}

void add_planned_node(const CUlaunchConfig& cfg, CUfunction f, void** args, node_target& target,
                      const plan_entry& e) {
  const driver_api& d = driver();
  if (!target.graph) {
    throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::add_kernel_node", "null graph", display_name(e.kernel),
                e.plan.to_string());
  }
  if (!d.cuGraphAddNode || !d.cuGraphKernelNodeSetAttribute) {
    throw error(CUDA_ERROR_NOT_SUPPORTED, "launchfit::add_kernel_node",
                "the CUDA driver has no cuGraphAddNode (CUDA 12.3 or newer is needed)", display_name(e.kernel),
                e.plan.to_string());
  }
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_KERNEL;
  params.kernel = kernel_node_params<CUDA_KERNEL_NODE_PARAMS_v3>(cfg, f, args);
  // The launch's attributes, as cuLaunchKernelEx would take them: a programmatic launch becomes programmatic
  // edges (the node may start while its dependencies finish, as a stream launch with .pdl() may), every
  // other attribute is set on the node.
  bool programmatic = false;
  for (unsigned i = 0; i < cfg.numAttrs; ++i)
    programmatic |= cfg.attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  std::vector<CUgraphEdgeData> edges;
  if (programmatic && target.dependency_count > 0) {
    CUgraphEdgeData edge{};
    edge.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    edge.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    edges.assign(target.dependency_count, edge);
  }
  CUgraphNode node = nullptr;
  const CUresult added = d.cuGraphAddNode(&node, target.graph, target.dependencies,
                                          edges.empty() ? nullptr : edges.data(), target.dependency_count, &params);
  check(added, "cuGraphAddNode", display_name(e.kernel), e.plan.to_string());
  for (unsigned i = 0; i < cfg.numAttrs; ++i) {
    if (cfg.attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) continue;
    check(d.cuGraphKernelNodeSetAttribute(node, cfg.attrs[i].id, &cfg.attrs[i].value),
          "cuGraphKernelNodeSetAttribute", display_name(e.kernel), e.plan.to_string());
  }
  target.node = node;
}

}  // namespace launchfit::detail

namespace launchfit {

std::string graph_tuning::to_string() const {
  std::string out = std::to_string(tuned) + " tuned, " + std::to_string(unchanged) + " unchanged, " +
                    std::to_string(left) + " left";
  for (const graph_node_report& n : nodes) {
    out += '\n';
    switch (n.result) {
      case graph_node_report::outcome::tuned:
        out += "tuned " + n.kernel + ": " + n.before + " -> " + n.after;
        break;
      case graph_node_report::outcome::unchanged:
        out += "unchanged " + n.kernel + ": " + n.after + " (" + n.why + ")";
        break;
      case graph_node_report::outcome::left:
        out += "left " + n.kernel + ": " + n.why;
        break;
    }
  }
  return out;
}

graph_tuning tune_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream) {
  using namespace detail;
  if (!graph || !exec) throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::tune_graph", "null graph or graph exec");
  const driver_api& d = driver();
  if (!d.cuGraphGetNodes || !d.cuGraphKernelNodeGetParams || !d.cuGraphExecKernelNodeSetParams ||
      !d.cuGraphKernelNodeSetParams || !d.cuGraphNodeGetType) {
    throw error(CUDA_ERROR_NOT_SUPPORTED, "launchfit::tune_graph", "the CUDA driver lacks the graph entry points");
  }
  std::size_t count = 0;
  check(d.cuGraphGetNodes(graph, nullptr, &count), "cuGraphGetNodes");
  std::vector<CUgraphNode> listed(count);
  if (count) check(d.cuGraphGetNodes(graph, listed.data(), &count), "cuGraphGetNodes");
  listed.resize(std::min(count, listed.size()));
  const std::set<CUgraphNode> nodes(listed.begin(), listed.end());

  // This graph's launches, in the order of their nodes in the graph; records of a node the graph no longer
  // has (a graph destroyed since, whose handle another was given) are dropped.
  std::vector<std::shared_ptr<captured_launch>> mine;
  {
    captures& all = the_captures();
    std::lock_guard<std::mutex> lock(all.m);
    for (auto it = all.by_node.begin(); it != all.by_node.end();) {
      if (it->first.first != graph) {
        ++it;
        continue;
      }
      if (!still_the_node(*it->second, nodes)) {
        it = all.by_node.erase(it);
        continue;
      }
      mine.push_back(it->second);
      ++it;
    }
  }
  std::map<CUgraphNode, std::size_t> order;
  for (std::size_t i = 0; i < listed.size(); ++i) order[listed[i]] = i;
  std::sort(mine.begin(), mine.end(), [&order](const auto& a, const auto& b) { return order[a->node] < order[b->node]; });

  graph_tuning out;
  for (const std::shared_ptr<captured_launch>& c : mine) {
    graph_node_report rep;
    rep.node = c->node;
    rep.kernel = c->kernel;
    rep.before = c->plan_text;
    rep.after = c->plan_text;
    if (!c->left.empty()) {
      rep.result = graph_node_report::outcome::left;
      rep.why = c->left;
    } else if (current_context(c->request).id != c->context_id) {
      rep.result = graph_node_report::outcome::left;
      rep.why = "captured in another CUDA context: make that context current to tune it";
    } else if (!c->deferred) {
      rep.result = graph_node_report::outcome::unchanged;
      rep.why = "its plan was not kept from trials by the capture (a stored or tuned plan, or a policy that "
                "times nothing)";
    } else {
      launch_request r = c->request;
      r.stream = stream;
      const plan_reader reading;
      std::optional<plan_entry> local;
      const plan_entry& e = entry_for(r, local);
      if (e.tuning_deferred) {
        rep.result = graph_node_report::outcome::left;
        rep.why = "its stream is being captured, so its policy could not time candidates";
      } else {
        const dims grid = grid_for(e.plan, r.shape, e.max_grid_x);
        CUlaunchConfig cfg;
        launch_attributes attrs;  // already on the node: a node update keeps its attributes and edges
        fill_launch_config(cfg, attrs, e.plan, e.options, grid, nullptr);
        const auto p = kernel_node_params<CUDA_KERNEL_NODE_PARAMS>(cfg, e.function, c->arg_ptrs.data());
        const std::string text = e.plan.to_string();
        check(d.cuGraphExecKernelNodeSetParams(exec, c->node, &p), "cuGraphExecKernelNodeSetParams",
              display_name(e.kernel), text);
        check(d.cuGraphKernelNodeSetParams(c->node, &p), "cuGraphKernelNodeSetParams", display_name(e.kernel),
              text);
        rep.result = graph_node_report::outcome::tuned;
        rep.after = text;
        std::lock_guard<std::mutex> lock(the_captures().m);
        c->function = e.function;
        c->plan_text = text;
      }
    }
    switch (rep.result) {
      case graph_node_report::outcome::tuned: ++out.tuned; break;
      case graph_node_report::outcome::unchanged: ++out.unchanged; break;
      case graph_node_report::outcome::left: ++out.left; break;
    }
    out.nodes.push_back(std::move(rep));
  }
  detail::logger()->info("tune_graph: {}", out.tuned + out.unchanged + out.left == 0
                                       ? std::string("no launch of launchfit's was captured into this graph")
                                       : escape_text(out.to_string(), 1 << 16));
  return out;
}

}  // namespace launchfit

// SPDX-License-Identifier: MIT
// CUDA graphs (launchfit/graph.hpp): launches inside a stream capture remembered for tune_graph(), which
// tunes them outside the capture and sets the instantiated graph's nodes in place, and kernel nodes from specs.

#include "launchfit/graph.hpp"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <deque>
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
#include "launchfit/launch.hpp"
#include "lifecycle.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "plan_match.hpp"
#include "text.hpp"
#include "tuning.hpp"
#include "tuning_lease.hpp"

namespace launchfit::detail {
namespace {

// Launches remembered at most (each a copy of its arguments and of its smem rule's answers, about 1 KB): beyond
// this many the oldest is dropped, said once. No user object in the graph tells when a graph is destroyed: an
// executable graph holding one costs every replay 1-2 us (1.0074-1.0155 of the same chain without one, a
// 60-kernel chain on an H100), for the graph's whole life. A destroyed graph's launches are dropped as the
// oldest, or by tune_graph() of a graph at the same handle (still_the_node() does not find them).
constexpr std::size_t max_captured_launches = 1 << 12;
// An smem rule is asked at the capture for the block sizes a policy may choose (the callable may not outlive
// the launch), up to this: see ask_smem_rule().
constexpr int max_block_threads = 1024;
// What a block the rule was not asked for gets: more than any SM holds, so no plan can choose it.
constexpr std::size_t unknown_smem = std::size_t{1} << 40;

// One launch inside a capture. A launch whose policy asked for trials (`deferred`) keeps everything its
// request needs to be planned again after the launch has returned: owned copies of the policy, the kernel,
// the family, the smem rule's answers and the arguments; another keeps only what the report says of it.
struct captured_launch {
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  std::uint64_t order = 0;  // when it was remembered: the oldest is dropped first
  std::uint64_t context_id = 0;
  // What the node runs now (under the captures' lock once remembered).
  CUfunction function = nullptr;
  dims grid, block;
  std::size_t smem = 0;
  const kept_plan* plan = nullptr;  // its plan and kernel, never freed (rendered only for tune_graph()'s report)
  bool deferred = false;  // its policy asked for trials the capture did not allow, and it is not tuned yet
  std::string left;       // why it cannot be tuned in place; empty: it can

  std::shared_ptr<const policy> owned_policy;
  std::optional<launchfit::kernel> driver_kernel;
  std::vector<family_member> family;
  std::vector<std::pair<int, std::size_t>> smem_answers;  // (block threads, dynamic smem), sorted
  smem_rule_fn smem_rule;                                 // answers from smem_answers
  std::vector<std::max_align_t> arg_storage;
  std::vector<void*> arg_ptrs;
  std::vector<std::size_t> arg_sizes;
  launch_request request;  // pointers into the members above; stream, node, bind and reset unset
};

struct captures {
  std::mutex m;
  std::map<std::pair<CUgraph, CUgraphNode>, std::shared_ptr<captured_launch>> by_node;
  // The keys in the order they were remembered, with their `order` (a key replaced or dropped since leaves an
  // item that no longer matches, skipped).
  std::deque<std::pair<std::pair<CUgraph, CUgraphNode>, std::uint64_t>> oldest_first;
  std::uint64_t next_order = 1;
  bool told_full = false;
  // Per graph, its launches that would have been tuned and were dropped as the oldest, one per node: what the
  // node ran (function, grid, block, smem and the arguments' bytes). tune_graph() says how many of the graph it
  // cannot tune: those whose node is still in the graph, not remembered, and runs exactly that launch, so that
  // neither a destroyed graph's launches nor a later capture's at reused handles count for another graph. At
  // most max_forgotten_graphs graphs and max_forgotten_launches launches: past that the graphs with the fewest
  // are dropped first (a graph past the bound on its own drops others of its own).
  struct forgotten_launch {
    CUfunction function = nullptr;
    dims grid, block;
    std::size_t smem = 0;
    std::vector<std::size_t> arg_sizes;
    std::uint64_t args_hash = 0;
    bool operator==(const forgotten_launch& o) const {
      return function == o.function && grid == o.grid && block == o.block && smem == o.smem &&
             arg_sizes == o.arg_sizes && args_hash == o.args_hash;
    }
  };
  std::map<CUgraph, std::map<CUgraphNode, forgotten_launch>> forgotten;
  std::size_t forgotten_launches = 0;
};
constexpr std::size_t max_forgotten_graphs = 1 << 10;
constexpr std::size_t max_forgotten_launches = 1 << 16;

// The arguments' bytes, in order, as one hash: what a kernel node's parameters are compared by.
std::uint64_t hash_arguments(void* const* args, const std::vector<std::size_t>& sizes) noexcept {
  field_hash h;
  for (std::size_t i = 0; i < sizes.size(); ++i) h.text({static_cast<const char*>(args[i]), sizes[i]});
  return h.h;
}

// Notes `dropped` as forgotten under its graph and node, within the bounds above.
void note_forgotten_locked(captures& all, const captured_launch& dropped) {
  captures::forgotten_launch f;
  f.function = dropped.function;
  f.grid = dropped.grid;
  f.block = dropped.block;
  f.smem = dropped.smem;
  f.arg_sizes = dropped.arg_sizes;
  f.args_hash = hash_arguments(dropped.arg_ptrs.data(), dropped.arg_sizes);
  auto& mine = all.forgotten[dropped.graph];
  if (mine.insert_or_assign(dropped.node, std::move(f)).second) ++all.forgotten_launches;
  while (all.forgotten.size() > max_forgotten_graphs || all.forgotten_launches > max_forgotten_launches) {
    auto fewest = all.forgotten.end();
    for (auto it = all.forgotten.begin(); it != all.forgotten.end(); ++it)
      if (it->first != dropped.graph && (fewest == all.forgotten.end() || it->second.size() < fewest->second.size()))
        fewest = it;
    if (fewest == all.forgotten.end()) {  // this graph alone: another of its nodes goes
      auto other = mine.begin();
      if (other->first == dropped.node) ++other;
      if (other == mine.end()) break;
      mine.erase(other);
      --all.forgotten_launches;
      continue;
    }
    all.forgotten_launches -= fewest->second.size();
    all.forgotten.erase(fewest);
  }
}

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

// Drops the oldest launches beyond max_captured_launches (destroyed by the caller, outside the lock: a policy
// copy's destructor is the user's code), and the queue's items that match no launch once they outnumber the
// launches.
void drop_oldest_locked(captures& all, std::vector<std::shared_ptr<captured_launch>>& gone) {
  while (all.by_node.size() > max_captured_launches && !all.oldest_first.empty()) {
    const auto [key, order] = all.oldest_first.front();
    all.oldest_first.pop_front();
    const auto it = all.by_node.find(key);
    if (it == all.by_node.end() || it->second->order != order) continue;
    if (!all.told_full) {
      all.told_full = true;
      logger()->warn("{} launches inside stream captures are remembered for tune_graph() already: the oldest "
                     "are forgotten from now on (their nodes keep their static plans unless tuned before)",
                     max_captured_launches);
    }
    const captured_launch& dropped = *it->second;
    if (dropped.deferred && dropped.left.empty()) note_forgotten_locked(all, dropped);
    gone.push_back(std::move(it->second));
    all.by_node.erase(it);
  }
  if (all.oldest_first.size() > 2 * all.by_node.size() + 64) {
    std::deque<std::pair<std::pair<CUgraph, CUgraphNode>, std::uint64_t>> kept;
    for (const auto& item : all.oldest_first) {
      const auto it = all.by_node.find(item.first);
      if (it != all.by_node.end() && it->second->order == item.second) kept.push_back(item);
    }
    all.oldest_first.swap(kept);
  }
}

// Why a launch cannot be tuned once it has returned; empty: it can.
const char* why_not_tunable_later(const launch_request& r) {
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
  return "";
}

// The smem rule's answers for the block sizes a policy may choose: every size below a warp and every whole
// warp, the kernel's own limit and the captured plan's block (or every size the block rule allows), and each
// family member's block, up to the kernel's limit on threads per block (its launch bounds; for a family, its
// widest member's: each member's own limit is checked when it is planned). A size the rule refuses (throws
// for) is one no plan may choose; false (with `why`) where it refuses every size.
bool ask_smem_rule(const launch_request& r, captured_launch& c, int kernel_max_threads, int captured_block,
                   std::string& why) {
  int most = kernel_max_threads > 0 ? std::min(kernel_max_threads, max_block_threads) : max_block_threads;
  std::vector<int> members;
  if (r.family && r.family_size) {
    most = 0;
    for (std::size_t i = 0; i < r.family_size; ++i) {
      members.push_back(r.family[i].block);
      most = std::max(most, r.family[i].block);
    }
    most = std::min(std::max(most, 1), max_block_threads);
  }
  std::string first_refusal;
  for (int t = 1; t <= most; ++t) {
    const bool asked =
        r.blocks.k == block_rule::kind::any
            ? (t < 32 || t % 32 == 0 || t == most || t == captured_block ||
               std::find(members.begin(), members.end(), t) != members.end())
            : r.blocks.allows(t);
    if (!asked) continue;
    try {
      c.smem_answers.emplace_back(t, (*r.smem_fn)(t));
    } catch (...) {
      if (first_refusal.empty()) first_refusal = std::to_string(t);
    }
  }
  if (c.smem_answers.empty()) {
    why = "its smem rule threw for every block size it was asked (the first: " +
          (first_refusal.empty() ? std::string("none asked") : first_refusal + " threads") + ")";
    return false;
  }
  const auto* answers = &c.smem_answers;
  c.smem_rule = [answers](int t) {
    const auto it = std::lower_bound(answers->begin(), answers->end(), std::make_pair(t, std::size_t{0}));
    return it != answers->end() && it->first == t ? it->second : unknown_smem;
  };
  c.request.smem_fn = &c.smem_rule;
  return true;
}

// The launch's request with owned copies of what it points to (the policy, the kernel, the arguments...);
// false (with `why`) where one cannot be made.
bool copy_request(const launch_request& r, captured_launch& c, int kernel_max_threads, int captured_block,
                  std::string& why) {
  c.request = r;
  c.request.stream = nullptr;
  c.request.node = nullptr;
  c.request.bind = nullptr;
  c.request.bind_self = nullptr;
  c.request.reset = nullptr;
  const policy_copy pc = r.copy_policy(r.policy_holder);
  if (!pc.policy) {
    why = "its policy cannot be copied (held by a raw pointer, or a type without a copy constructor), so it "
          "cannot be planned again after the launch has returned";
    return false;
  }
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
  if (r.smem_fn && !ask_smem_rule(r, c, kernel_max_threads, captured_block, why)) return false;
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

// What a remembered node runs now, as read under the captures' lock.
struct node_state {
  CUfunction function = nullptr;
  dims grid, block;
  std::size_t smem = 0;
  const kept_plan* plan = nullptr;
  bool deferred = false;
};

// Whether `c.node` is still the node `c` remembers: a kernel node of the graph (else `gone`: removed, and its
// handle maybe another node's now), running what c says it runs (function, grid, block, dynamic smem) on c's
// arguments (else `changed`: the program set it to other parameters, cudaGraphKernelNodeSetParams).
enum class node_match { same, gone, changed };
// `node`'s kernel parameters, where it is a kernel node of the graph whose nodes are `nodes`; false otherwise.
bool kernel_node_of(CUgraphNode node, const std::set<CUgraphNode>& nodes, CUDA_KERNEL_NODE_PARAMS& p) {
  if (!nodes.count(node)) return false;
  const driver_api& d = driver();
  CUgraphNodeType type{};
  return d.cuGraphNodeGetType(node, &type) == CUDA_SUCCESS && type == CU_GRAPH_NODE_TYPE_KERNEL &&
         d.cuGraphKernelNodeGetParams(node, &p) == CUDA_SUCCESS;
}

// Whether a kernel node's parameters launch this function with this grid, block and dynamic smem.
bool node_runs(const CUDA_KERNEL_NODE_PARAMS& p, CUfunction function, dims grid, dims block, std::size_t smem) {
  return p.func == function && dims{p.gridDimX, p.gridDimY, p.gridDimZ} == grid &&
         dims{p.blockDimX, p.blockDimY, p.blockDimZ} == block && p.sharedMemBytes == smem;
}

node_match still_the_node(const captured_launch& c, const node_state& now, const std::set<CUgraphNode>& nodes) {
  CUDA_KERNEL_NODE_PARAMS p{};
  if (!kernel_node_of(c.node, nodes, p)) return node_match::gone;
  if (!node_runs(p, now.function, now.grid, now.block, now.smem)) return node_match::changed;
  if (c.arg_sizes.empty()) return node_match::same;
  if (!p.kernelParams) return node_match::changed;
  for (std::size_t i = 0; i < c.arg_sizes.size(); ++i) {
    if (!p.kernelParams[i] || std::memcmp(p.kernelParams[i], c.arg_ptrs[i], c.arg_sizes[i]) != 0)
      return node_match::changed;
  }
  return node_match::same;
}

// Whether the graph allocates or frees memory in its own nodes (cudaMallocAsync inside the capture): buffers
// that exist only while it runs, which a trial outside it would read as an illegal address.
bool allocates_in_graph(const std::vector<CUgraphNode>& nodes) {
  const driver_api& d = driver();
  for (CUgraphNode n : nodes) {
    CUgraphNodeType type{};
    if (d.cuGraphNodeGetType(n, &type) != CUDA_SUCCESS) return true;  // any doubt: do not run trials
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_MEM_FREE) return true;
  }
  return false;
}

// The kernel node parameters of what `c`'s node runs now, through the one marshal (its attributes stay on the
// node).
CUDA_KERNEL_NODE_PARAMS params_now(const captured_launch& c, const node_state& now) {
  plan ran;
  ran.block = now.block;
  ran.dynamic_smem_bytes = now.smem;
  CUlaunchConfig cfg;
  launch_attributes attrs;
  fill_launch_config(cfg, attrs, ran, now.grid, nullptr);
  return kernel_node_params<CUDA_KERNEL_NODE_PARAMS>(cfg, now.function, const_cast<void**>(c.arg_ptrs.data()));
}

// What set_node() did: nothing to say (both nodes set), or why the driver would not, and whether the
// executable graph runs the new plan all the same (it refused to set its node back).
struct node_update {
  std::string refused;
  bool exec_runs_new = false;
};

// Sets the executable graph's node and the graph's to `to`; where the driver refuses, both run what they ran
// (an executable node updated before the graph's node was refused is set back, where the driver allows).
node_update set_node(CUgraphExec exec, const captured_launch& c, const node_state& now,
                     const CUDA_KERNEL_NODE_PARAMS& to) {
  const driver_api& d = driver();
  const CUresult in_exec = d.cuGraphExecKernelNodeSetParams(exec, c.node, &to);
  if (in_exec != CUDA_SUCCESS) {
    return {"the CUDA driver refused to update the executable graph's node (cuGraphExecKernelNodeSetParams: " +
                error_name(in_exec) + "): it runs its captured plan",
            false};
  }
  const CUresult in_graph = d.cuGraphKernelNodeSetParams(c.node, &to);
  if (in_graph == CUDA_SUCCESS) return {};
  const CUDA_KERNEL_NODE_PARAMS was = params_now(c, now);  // what it ran
  const CUresult back = d.cuGraphExecKernelNodeSetParams(exec, c.node, &was);
  return {"the CUDA driver refused to update the graph's node (cuGraphKernelNodeSetParams: " + error_name(in_graph) +
              (back == CUDA_SUCCESS ? std::string("): both run its captured plan")
                                    : "), and to set the executable graph's node back (" + error_name(back) +
                                          "): the executable graph runs the tuned plan, the graph the captured one"),
          back != CUDA_SUCCESS};
}

}  // namespace

capture_state stream_capture(CUstream stream) noexcept {
  const driver_api* d = nullptr;
  try {
    d = &driver();
  } catch (...) {
    return capture_state::unknown;
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!d->cuStreamIsCapturing || d->cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS)
    return capture_state::unknown;
  switch (status) {
    case CU_STREAM_CAPTURE_STATUS_NONE: return capture_state::none;
    case CU_STREAM_CAPTURE_STATUS_ACTIVE: return capture_state::active;
    default: return capture_state::invalidated;
  }
}

namespace {
// Remembers `node` of `graph`, which the launch made, for tune_graph(). Throws only for lack of memory.
void remember_node(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid, CUgraph graph,
                   CUgraphNode node);
}  // namespace

bool note_captured_launch(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid) noexcept {
  try {
    const driver_api& d = driver();
    if (!d.cuStreamGetCaptureInfo) return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph graph = nullptr;
    const CUgraphNode* deps = nullptr;
    const CUgraphEdgeData* edges = nullptr;
    std::size_t n = 0;
    if (d.cuStreamGetCaptureInfo(r.stream, &status, &id, &graph, &deps, &edges, &n) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
      return false;  // launched outside a capture
    // The launch just captured is the stream's one dependency now: the node it made.
    if (n != 1 || !deps || !graph) {
      spdlog::logger& l = logger_fast();
      if (l.should_log(spdlog::level::debug)) {
        l.debug("launch of {} inside a capture: its node cannot be told ({} dependencies); tune_graph() will not "
                "see it", display_name(e.kernel), n);
      }
      return true;
    }
    (void)id;
    remember_node(r, e, kept, grid, graph, deps[0]);
    return true;
  } catch (...) {
    // Out of memory or a driver without graphs: this launch stays out of tune_graph(); the launch itself ran.
    return true;
  }
}

void note_planned_node(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid) noexcept {
  if (!r.node || !r.node->graph || !r.node->node) return;
  try {
    remember_node(r, e, kept, grid, reinterpret_cast<CUgraph>(r.node->graph),
                  reinterpret_cast<CUgraphNode>(r.node->node));
  } catch (...) {
    // Out of memory: this node stays out of tune_graph(); the node itself was added.
  }
}

namespace {
void remember_node(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid, CUgraph graph,
                   CUgraphNode node) {
  auto c = std::make_shared<captured_launch>();
  c->graph = graph;
  c->node = node;
  c->function = e.function;
  c->grid = grid;
  c->block = e.plan.block;
  c->smem = e.plan.dynamic_smem_bytes;
  c->plan = &kept;
  c->deferred = e.tuning_deferred;
  c->context_id = e.key.context;
  c->left = why_not_tunable_later(r);
  // A driver-API kernel's arguments are checked against its parameters only where the driver reports them:
  // without that (drivers before CUDA 12.4) a launch's arguments may not be its node's parameters, and
  // comparing them with the node's would read past the node's (fewer, or smaller) parameters.
  if (c->left.empty() && r.driver_kernel && !e.param_sizes) {
    c->left = "the driver does not report its parameters (cuFuncGetParamInfo, CUDA 12.4), so its node's "
              "arguments cannot be checked against the launch's";
  }
  if (c->left.empty() && c->deferred &&
      !copy_request(r, *c, e.kernel.max_threads_per_block, e.plan.block_threads, c->left)) {
    c->owned_policy.reset();
    c->smem_answers.clear();
  }
  captures& all = the_captures();
  std::vector<std::shared_ptr<captured_launch>> gone;  // destroyed after the lock
  std::lock_guard<std::mutex> lock(all.m);
  const auto key = std::make_pair(c->graph, c->node);
  c->order = all.next_order++;
  all.oldest_first.emplace_back(key, c->order);
  all.by_node[key].swap(c);  // c: the launch it replaces (a node handle a destroyed graph had), destroyed after
  gone.push_back(std::move(c));
  drop_oldest_locked(all, gone);
}
}  // namespace

void add_planned_node(const CUlaunchConfig& cfg, CUfunction f, void** args, node_target& target,
                      const plan_entry& e) {
  const driver_api& d = driver();
  if (!target.graph) {
    throw error(CUDA_ERROR_INVALID_VALUE, "launchfit::add_kernel_node", "null graph", display_name(e.kernel),
                e.plan.to_string());
  }
  if (!d.cuGraphAddNode || !d.cuGraphKernelNodeSetAttribute || !d.cuGraphDestroyNode) {
    throw error(CUDA_ERROR_NOT_SUPPORTED, "launchfit::add_kernel_node",
                "the CUDA driver lacks cuGraphAddNode or cuGraphKernelNodeSetAttribute (a CUDA 13 driver is "
                "needed)",
                display_name(e.kernel), e.plan.to_string());
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
  check(added, "cuGraphAddNode", e.kernel, e.plan);
  for (unsigned i = 0; i < cfg.numAttrs; ++i) {
    if (cfg.attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) continue;
    const CUresult set = d.cuGraphKernelNodeSetAttribute(node, cfg.attrs[i].id, &cfg.attrs[i].value);
    if (set != CUDA_SUCCESS) {
      d.cuGraphDestroyNode(node);  // never a node without the attributes its launch requires
      check(set, "cuGraphKernelNodeSetAttribute", e.kernel, e.plan);
    }
  }
  target.node = node;
}

}  // namespace launchfit::detail

namespace launchfit {

std::string graph_tuning::to_string() const {
  std::string out = std::to_string(tuned) + " tuned, " + std::to_string(unchanged) + " unchanged, " +
                    std::to_string(left) + " left";
  if (forgotten > 0) {
    out += "; " + std::to_string(forgotten) + " launch" + (forgotten == 1 ? "" : "es") +
           " captured into this graph that would have been tuned " +
           (forgotten == 1 ? "was" : "were") +
           " forgotten (more than " + std::to_string(detail::max_captured_launches) +
           " launches inside captures are remembered at once): their nodes keep their static plans";
  }
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
  const bool allocates = allocates_in_graph(listed);

  // This graph's launches (a destroyed graph's handle may be this graph's now: still_the_node() tells), with
  // what each node runs now, read under the lock; then checked against the graph without it (driver calls).
  captures& all = the_captures();
  std::vector<std::pair<std::shared_ptr<captured_launch>, node_state>> mine;
  std::map<CUgraphNode, captures::forgotten_launch> forgotten_here;
  {
    std::lock_guard<std::mutex> lock(all.m);
    for (const auto& [key, c] : all.by_node) {
      if (key.first != graph) continue;
      mine.push_back({c, node_state{c->function, c->grid, c->block, c->smem, c->plan, c->deferred}});
    }
    if (const auto it = all.forgotten.find(graph); it != all.forgotten.end()) forgotten_here = it->second;
  }
  std::set<CUgraphNode> remembered;  // (the loop below moves `mine` away)
  for (const auto& m : mine) remembered.insert(m.first->node);
  std::vector<std::pair<std::shared_ptr<captured_launch>, node_state>> valid;
  std::vector<std::shared_ptr<captured_launch>> stale;
  std::vector<std::pair<std::shared_ptr<captured_launch>, node_state>> changed;
  for (auto& m : mine) {
    switch (still_the_node(*m.first, m.second, nodes)) {
      case node_match::same: valid.push_back(std::move(m)); break;
      case node_match::changed:
        changed.push_back(m);
        stale.push_back(m.first);
        break;
      case node_match::gone: stale.push_back(m.first); break;
    }
  }
  if (!stale.empty()) {
    std::lock_guard<std::mutex> lock(all.m);
    for (const auto& c : stale) {
      const auto it = all.by_node.find({c->graph, c->node});
      if (it != all.by_node.end() && it->second == c) all.by_node.erase(it);
    }
  }
  std::map<CUgraphNode, std::size_t> order;
  for (std::size_t i = 0; i < listed.size(); ++i) order[listed[i]] = i;
  std::sort(valid.begin(), valid.end(),
            [&order](const auto& a, const auto& b) { return order[a.first->node] < order[b.first->node]; });

  graph_tuning out;
  // The forgotten launches still in this graph: a node of it, not one remembered, running exactly the launch it
  // was captured with (a destroyed graph's at this handle, or nodes removed or changed since, are not this
  // graph's; they are dropped). One per node.
  std::vector<std::pair<CUgraphNode, captures::forgotten_launch>> not_here;
  for (auto& [node, f] : forgotten_here) {
    CUDA_KERNEL_NODE_PARAMS p{};
    bool here = !remembered.count(node) && kernel_node_of(node, nodes, p) &&
                node_runs(p, f.function, f.grid, f.block, f.smem);
    if (here && !f.arg_sizes.empty()) {
      here = p.kernelParams != nullptr;
      for (std::size_t i = 0; here && i < f.arg_sizes.size(); ++i) here = p.kernelParams[i] != nullptr;
      here = here && hash_arguments(p.kernelParams, f.arg_sizes) == f.args_hash;
    }
    if (here) {
      ++out.forgotten;
    } else {
      not_here.emplace_back(node, std::move(f));
    }
  }
  if (!not_here.empty()) {
    std::lock_guard<std::mutex> lock(all.m);
    if (const auto it = all.forgotten.find(graph); it != all.forgotten.end()) {
      auto& list = it->second;
      for (const auto& [node, f] : not_here) {
        const auto at = list.find(node);
        if (at == list.end() || !(at->second == f)) continue;  // noted again since: not the record checked
        list.erase(at);
        --all.forgotten_launches;
      }
      if (list.empty()) all.forgotten.erase(it);
    }
  }
  // A node's report as it stands before anything is done to it: left, running the plan it ran.
  const auto left_as_it_runs = [](const captured_launch& c, const node_state& now) {
    graph_node_report rep;
    rep.node = c.node;
    rep.kernel = display_name(*now.plan);
    rep.before = now.plan->plan.to_string();
    rep.after = rep.before;
    rep.result = graph_node_report::outcome::left;
    return rep;
  };
  // A node the program set to other parameters since it was captured: launchfit no longer knows what it runs
  // (reported once; forgotten from now on).
  std::sort(changed.begin(), changed.end(),
            [&order](const auto& a, const auto& b) { return order[a.first->node] < order[b.first->node]; });
  for (const auto& [c, now] : changed) {
    graph_node_report rep = left_as_it_runs(*c, now);
    rep.why = "the graph's node was set to other parameters since it was captured (kernel, grid, block, smem or "
              "arguments): launchfit no longer knows what it runs, and leaves it as it is";
    ++out.left;
    out.nodes.push_back(std::move(rep));
  }
  for (const auto& [c, now] : valid) {
    graph_node_report rep = left_as_it_runs(*c, now);
    if (!now.deferred) {
      rep.result = c->left.empty() ? graph_node_report::outcome::unchanged : graph_node_report::outcome::left;
      rep.why = !c->left.empty() ? c->left
                                 : c->owned_policy ? "tuned in place already"
                                                   : "its plan was not kept from trials by the capture (a stored "
                                                     "or tuned plan, or a policy that times nothing)";
      if (c->left.empty() && c->owned_policy) {
        // Tuned in place through another executable graph of this graph: the graph's node runs the tuned plan
        // (still_the_node() checked it), and this executable graph is set to it too (an executable graph
        // instantiated before the tuning still runs the captured plan).
        const CUDA_KERNEL_NODE_PARAMS p = params_now(*c, now);
        const CUresult set = d.cuGraphExecKernelNodeSetParams(exec, c->node, &p);
        if (set != CUDA_SUCCESS) {
          rep.result = graph_node_report::outcome::left;
          rep.why = "tuned in place already, but the CUDA driver refused to set this executable graph's node to "
                    "the tuned plan (cuGraphExecKernelNodeSetParams: " + error_name(set) +
                    "): it runs what it was instantiated with";
        }
      }
    } else if (!c->left.empty()) {
      rep.why = c->left;
    } else if (allocates) {
      rep.why = "the graph allocates memory in its own nodes (cudaMallocAsync inside the capture), which exists "
                "only while it runs: a trial outside it could not read its kernels' buffers";
    } else if (current_context(c->request).id != c->context_id) {
      rep.why = "captured in another CUDA context: make that context current to tune it";
    } else {
      try {
        launch_request r = c->request;
        r.stream = stream;
        const plan_reader reading;
        local_entry local;
        const graph_trials as_nodes_run;  // the trials time each candidate as graph replays
        const plan_entry& e = entry_for(r, local);
        if (e.tuning_deferred) {
          switch (stream_capture(stream)) {
            case capture_state::unknown:
              rep.why = "the driver could not tell whether the stream given to tune_graph() is being captured "
                        "(the legacy stream while another thread captures a blocking stream), so no trial ran: "
                        "give a stream created with cudaStreamNonBlocking";
              break;
            case capture_state::none:
              rep.why = "a capture on another thread planned this launch's kernel again while tune_graph() "
                        "tuned it, so no trial ran: call tune_graph() again";
              break;
            default:
              rep.why = "the stream given to tune_graph() is being captured, so no trial could run";
          }
        } else if (e.plan.match == plan_match::waiting) {
          rep.why =
              "another process of the fleet is tuning this plan: call tune_graph() again once it has "
              "published it";
        } else if (e.plan.match == plan_match::fallback) {
          // The policy declined (its trials could not run, or it chose nothing): the node keeps what it runs.
          rep.why = "its policy declined to tune it: " + e.plan.reason;
        } else {
          const dims grid = grid_for(e.plan, r.shape, e.max_grid_x);
          CUlaunchConfig cfg;
          launch_attributes attrs;  // already on the node: a node update keeps its attributes and edges
          fill_launch_config(cfg, attrs, e.plan, grid, nullptr);
          const auto p = kernel_node_params<CUDA_KERNEL_NODE_PARAMS>(cfg, e.function, c->arg_ptrs.data());
          const kept_plan& tuned = kept_of(e);
          const std::string text = tuned.plan.to_string();
          // A node the driver will not update keeps what it runs, in the executable graph and in the graph
          // alike, and is reported; the other nodes are tuned all the same.
          const node_update done = set_node(exec, *c, now, p);
          if (!done.refused.empty()) {
            rep.why = done.refused;
            if (done.exec_runs_new) rep.after = text;  // what the executable graph runs
          } else {
            rep.result = graph_node_report::outcome::tuned;
            rep.after = text;
            std::lock_guard<std::mutex> lock(all.m);
            c->function = e.function;
            c->grid = grid;
            c->block = e.plan.block;
            c->smem = e.plan.dynamic_smem_bytes;
            c->plan = &tuned;
            c->deferred = false;
          }
        }
      } catch (const std::exception& failed) {
        // Planning this node again failed (a policy that throws, a refused plan): it keeps what it runs, and
        // the other nodes are tuned all the same.
        rep.result = graph_node_report::outcome::left;
        rep.after = rep.before;
        rep.why = "planning it again failed, so it keeps what it runs: " + escape_text(failed.what(), 1024);
      } catch (...) {
        rep.result = graph_node_report::outcome::left;
        rep.after = rep.before;
        rep.why = "planning it again threw something that is not a std::exception, so it keeps what it runs";
      }
    }
    switch (rep.result) {
      case graph_node_report::outcome::tuned: ++out.tuned; break;
      case graph_node_report::outcome::unchanged: ++out.unchanged; break;
      case graph_node_report::outcome::left: ++out.left; break;
    }
    out.nodes.push_back(std::move(rep));
  }
  spdlog::logger& l = logger_fast();
  if (l.should_log(spdlog::level::info)) {  // the report's text only where it is logged
    l.info("tune_graph: {}", out.nodes.empty() ? std::string("no launch remembered for this graph (launches are "
                                                             "remembered where their plans are made inside a capture)")
                                               : escape_text(out.to_string(), 1 << 16));
  }
  return out;
}

}  // namespace launchfit

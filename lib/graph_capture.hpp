// SPDX-License-Identifier: MIT
#pragma once
// Internal: launches inside a CUDA stream capture, and kernel nodes from specs (launchfit/graph.hpp).
//
// A plan made while its stream is captured by a policy that is not a built-in is watched (plan_entry::captured);
// each launch of it inside a capture is remembered here with its node, a copy of its arguments and what its
// request needs to be planned again (the policy, the kernel, the smem rule's answers), so that tune_graph()
// can tune it after the launch has returned and set the instantiated graph's node to the tuned plan.

#include <cuda.h>

#include <optional>

#include "launchfit/detail/launch_request.hpp"
#include "launchfit/work.hpp"

namespace launchfit::detail {

struct plan_entry;
struct kept_plan;
class local_entry;

// Whether `stream` is being captured into a CUDA graph: one answer for every step that asks (trials are
// offered only at none, a launch is remembered only at active, a deferred plan is planned again only at none).
enum class capture_state { none, active, invalidated, unknown };
capture_state stream_capture(CUstream stream) noexcept;

// After a launch of an entry whose capture watch is on: where its stream is being captured, remembers the node
// the launch added. Answers whether the stream was being captured (the watch's count: plan_cache.hpp; a
// driver that cannot say counts as outside). Never throws (a launch that cannot be
// remembered is left out of tune_graph(), said once). `kept`: e's plan as kept_of() keeps it (its text and the
// kernel's name are made only for tune_graph()'s report).
bool note_captured_launch(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid) noexcept;
// The same for the node add_kernel_node() added (r.node) with a plan whose trials were kept from it (the capture
// of another thread on the legacy stream made its stream's state unknown): tune_graph() of its graph tunes it.
void note_planned_node(const launch_request& r, const plan_entry& e, const kept_plan& kept, dims grid) noexcept;

// Adds the kernel node r.node asks for, as `cfg` describes the launch (launch_config.hpp): its attributes set
// on the node (cooperative, cluster dims), a programmatic launch as programmatic edges from its dependencies.
void add_planned_node(const CUlaunchConfig& cfg, CUfunction f, void** args, node_target& target,
                      const plan_entry& e);

// The entry a request launches with (launch.cpp): the cached plan, or the miss path's.
const plan_entry& entry_for(const launch_request& r, local_entry& local);

}  // namespace launchfit::detail

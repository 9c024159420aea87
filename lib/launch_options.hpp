// SPDX-License-Identifier: MIT
#pragma once
// Internal: the launch options (launchfit/launch_options.hpp) in plan keys and stored keys: kept whole in
// the plan key (key_bits) and the stored key (key_text), read back from a stored key (parse_key_text) so
// that a stored, remote or plugin plan that adds or drops an option is refused (stored_plan_mismatch).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "launchfit/detail/plan_key_bits.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/work.hpp"

namespace launchfit::detail {

struct launch_request;
using launchfit::launch_options;

// The options a request asks for (the kernel's __cluster_dims__ are added by the planner, which reads them).
launch_options launch_options_of(const launch_request& r) noexcept;

// key_bits(), the options in a plan key: launchfit/detail/plan_key_bits.hpp.

// The options as the suffix of a stored key's policy text: " cooperative", " cluster=2x1x1", " pdl", in
// that order, each only when set ("" for none).
std::string key_text(const launch_options& o);

// The word a stored key's policy text names the work's kind by (" work=items"; planner_stored.cpp writes it,
// parse_key_text() reads it): "items", "grid_stride", "grid", "none".
const char* work_kind_word(work::shape kind) noexcept;

// A stored key's policy text split into the deciding policy's text ("max_occupancy(prefer_block=256,...)")
// and what its suffix says of the launch options; the other suffix words (blocks=, rows=32, shape=, sms=,
// work=, family=) are left in `rest`, the work's kind also in `work`. nullopt when the text is malformed (no "name(...)", an unknown suffix word).
struct stored_key_text {
  std::string policy;        // up to and including the policy's closing ')'
  launch_options options;    // cooperative, cluster, programmatic, waves as the key says (smem: see below)
  block_shape shape;         // the block shape its " shape=" word says (the default without one)
  std::string rest;          // the other suffix words, with their leading spaces
  std::string work;          // the work's kind its " work=" word names (work_kind_word()); "" without one
};
std::optional<stored_key_text> parse_key_text(std::string_view text);

// A block shape from its text (block_shape::to_string(): "x=32n,y=3,per_thread_y=4"), or nullopt when the
// text is not one a valid shape writes.
std::optional<block_shape> parse_block_shape(std::string_view text);

// The fixed dynamic smem a stored key's smem rule text says ("bytes=4096" → 4096), or nullopt for a rule of
// the block size ("fn=...") or a malformed text.
std::optional<std::size_t> fixed_smem_of(std::string_view smem_rule_text);

// Why a stored plan does not launch as its key says ("the entry's plan is cooperative, its key is not"),
// or an empty string: cooperative, cluster dims, PDL and fixed dynamic smem (key.options.smem_bytes, when
// key.options.smem_rule is 0) must be exactly the key's, the plan's block must have the key's block shape,
// and the plan's policy text (when it has one) the key's policy. A rule's smem is checked against the rule at
// launch.
std::string stored_plan_mismatch(const stored_key_text& key, const plan& p);

}  // namespace launchfit::detail

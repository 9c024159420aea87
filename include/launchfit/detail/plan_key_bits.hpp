// SPDX-License-Identifier: MIT
#pragma once
// Internal: the two parts of a plan key (launchfit/cache.hpp: plan_key::launch and plan_key::shape) that follow
// from a spec's launch options, block rule, block shape and work. Inline, in a header: a launch computes them where
// its spec is written (make_probe()), so a spec of constant options keys its plan at compile time; the library keys
// a whole request by the same functions (lib/planner.hpp). Not part of the public API.

#include <cstdint>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/work.hpp"

namespace launchfit::detail {

// The options in a plan key (plan_key::launch): bit 0 cooperative, cluster x/y/z in bits 1-16, 17-32,
// 33-48, bit 49 programmatic, bit 50 non-portable cluster sizes allowed. (The SM budget is in
// plan_key::shape.) It reads neither the dims of a cluster of one block nor cluster_from_kernel.
// `cooperative_policy`: the policy is cooperative() (a spec's options, to which make_request() adds it).
inline std::uint64_t key_bits(const launch_options& o, bool cooperative_policy = false) noexcept {
  const dims& c = o.cluster;
  const std::uint64_t bits = (o.cooperative || cooperative_policy ? 1u : 0u) | (std::uint64_t{o.programmatic} << 49) |
                             (std::uint64_t{o.non_portable_cluster} << 50);
  if (c.count() <= 1) return bits;
  return bits | (std::uint64_t{c.x & 0xffffu} << 1) | (std::uint64_t{c.y & 0xffffu} << 17) |
         (std::uint64_t{c.z & 0xffffu} << 33);
}

// Whether the key can hold a cluster: each dimension at most 65535 (the key keeps 16 bits of each) and none 0
// (never "no cluster": the kernel may use one). A launch of another is refused where it is planned.
inline bool keyable_cluster(const dims& c) noexcept {
  return (c.x | c.y | c.z) <= 0xffffu && c.x != 0 && c.y != 0 && c.z != 0;
}

// An SM budget at or above this is every SM of any device (as one above the context's SMs is): keyed as one value,
// never cut to its low bits (sms(8) and sms((1 << 24) + 8) are different plans).
constexpr int max_keyed_sms = 0xffffff;

// What shapes the block and the resident grid beyond the policy (plan_key::shape): the block rule, the block shape
// (block_y, x multiple, rows per thread), multi-dimensional work (its blocks are shaped in rows of 32), the SM
// budget, the work's kind and a grid_stride launch's waves cap, and a spec without work (its plan says
// plan::without_work where the policy decides by the work, so it is not the plan of the same spec with work even
// where their buckets agree). The kind: items(n) and grid_stride(n) launch different grids for one plan, and a
// policy that times candidates (autotune) or reads the query's work kind decides for the grid it was given, so a
// plan tuned for one kind is never the other's. 0 for 1-D items work with none of these.
// `w`: the launch's work (its waves are the options').
inline std::uint64_t shape_bits(const block_rule& blocks, const block_shape& shape_rule, const launch_options& options,
                                const work& w) noexcept {
  const std::uint64_t rule = blocks.k == block_rule::kind::any ? 0 : blocks.hash();
  const std::uint64_t shape = shape_rule.is_set() ? shape_rule.hash() : 0;
  const std::uint64_t waves = w.kind == work::shape::grid_stride ? options.waves : 0;
  const std::uint64_t kind = w.kind == work::shape::none          ? 4u
                             : w.kind == work::shape::grid_stride ? 8u
                             : w.kind == work::shape::grid        ? 16u
                                                                  : 0u;
  const int sms = options.sm_budget < max_keyed_sms ? options.sm_budget : max_keyed_sms;
  const std::uint64_t extra =
      (w.rank >= 2 ? 2u : 0u) | kind | (static_cast<std::uint64_t>(sms) << 8) | (waves << 32);
  if ((rule | extra | shape) == 0) return 0;
  const std::uint64_t h = hash_combine(rule, extra);
  return (shape ? hash_combine(h, shape) : h) | 1;
}

}  // namespace launchfit::detail

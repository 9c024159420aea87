// SPDX-License-Identifier: MIT
#pragma once
// The plan a test's own policy makes through the stub driver: `block` threads, as many resident blocks per SM
// as fit (the query's answer), with the test's reason. And kernel families of stub functions.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "launchfit/detail/launch_request.hpp"
#include "launchfit/policy.hpp"

namespace launchfit_test {

inline launchfit::plan full_residency_plan(const launchfit::query& q, unsigned block, std::string reason) {
  launchfit::plan p;
  p.block = launchfit::dims{block, 1, 1};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = q.active_blocks_for(static_cast<int>(block));
  p.reason = std::move(reason);
  return p;
}

// A kernel family of stub functions: member i is found by the address of family_tags[i], as a runtime kernel by
// its host stub, and resolves to family_functions[i] (set by the test).
constexpr int family_capacity = 8;
inline int family_tags[family_capacity];
inline CUfunction family_functions[family_capacity];
inline cudaFunction_t resolve_family_member(const void* stub) {
  for (int i = 0; i < family_capacity; ++i)
    if (stub == &family_tags[i]) return reinterpret_cast<cudaFunction_t>(family_functions[i]);
  return nullptr;
}
// Makes `r` (from make_request()) the request of the family `members` under the kernel id `id`.
inline void as_family(launchfit::detail::launch_request& r, std::uintptr_t id,
                      const launchfit::detail::family_member* members, std::size_t count) {
  r.kernel_id = id;
  r.stub = members[0].stub;
  r.resolve = &resolve_family_member;
  r.family = members;
  r.family_size = count;
}

}  // namespace launchfit_test

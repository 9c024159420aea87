// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief launchfit::family: a kernel written once per block size (reduce<64>, reduce<128>, ...), launched as
/// one kernel.
///
// launchfit::family — a kernel written once per block size (reduce<64>, reduce<128>, ...), launched as one:
// the policy chooses the member by its block, each member's resources queried, the choice cached and logged.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "launchfit/launch.hpp"

namespace launchfit {

template <class Signature>
class family;

// The instantiations of one kernel template, keyed by the block each is written for:
//   static const launchfit::family<void(const float*, float*, unsigned)> reduce_family{
//       {64, reduce<64>}, {128, reduce<128>}, {256, reduce<256>}, {512, reduce<512>}};
//   launchfit::launch(reduce_family, launchfit::max_occupancy().items(n), in, out, n);
// Every policy chooses among the members' blocks only (with the launch's block rule, if any), asking each
// member's own occupancy; autotune times each candidate with its member.
template <class... Params>
class family<void(Params...)> {
 public:
  using kernel_type = void (*)(Params...);  // every member's type: the same parameters
  // One instantiation and the block it is written for: {256, reduce<256>}.
  struct member {
    int block;           // block threads the member is written for
    kernel_type kernel;  // the instantiation
  };
  static constexpr std::size_t max_members = 16;  // members a family holds at most

  // Throws launchfit::error for no member, more than 16, a null kernel, a block outside 1..1024, or two
  // members with the same block.
  family(std::initializer_list<member> members) {
    if (members.size() == 0 || members.size() > max_members) {
      throw error(errc::invalid_argument, "launchfit::family",
                  "a family has 1.." + std::to_string(max_members) + " members, got " +
                      std::to_string(members.size()));
    }
    std::uint64_t id = 0x66616d696c79ULL;
    for (const member& m : members) {
      // A null kernel is refused as launch() refuses one; the rest are the family's own rules.
      if (!m.kernel) {
        throw error(
            CUDA_ERROR_INVALID_HANDLE, "launchfit::family",
            "member " + std::to_string(size_) + ": null kernel (block " + std::to_string(m.block) + ")");
      }
      if (m.block <= 0 || m.block > 1024) {
        throw error(
            errc::invalid_argument, "launchfit::family",
            "member " + std::to_string(size_) + ": block " + std::to_string(m.block) + " outside 1..1024");
      }
      for (std::size_t i = 0; i < size_; ++i) {
        if (members_[i].block == m.block) {
          throw error(errc::invalid_argument, "launchfit::family",
                      "two members for block " + std::to_string(m.block));
        }
      }
      members_[size_++] = detail::family_member{m.block, reinterpret_cast<const void*>(m.kernel)};
      id = detail::mix_hash(detail::mix_hash(id, static_cast<std::uint64_t>(m.block)),
                            reinterpret_cast<std::uintptr_t>(m.kernel));
    }
    id_ = id | 1;  // never a valid function address: odd
  }

  // Number of members.
  std::size_t size() const noexcept { return size_; }
  // The members, in the order given (for the library's planner).
  const detail::family_member* members() const noexcept { return members_.data(); }
  // Identity in plan keys: the members and their blocks, whatever family object holds them.
  std::uintptr_t id() const noexcept { return id_; }

 private:
  std::array<detail::family_member, max_members> members_{};
  std::size_t size_ = 0;
  std::uintptr_t id_ = 0;
};

namespace detail {
template <class... Params, class Policy>
launch_request family_request(const family<void(Params...)>& f, const spec<Policy>& s) {
  launch_request r = make_request(s);
  r.kernel_id = f.id();
  r.stub = f.members()[0].stub;
  r.resolve = &resolve_runtime_kernel;
  r.family = f.members();
  r.family_size = f.size();
  return r;
}
}  // namespace detail

// Launches the member the policy chooses; returns what was launched (plan().block_threads is its block).
// Arguments are taken by value, as launch() takes them.
template <class... Params, class Policy, class... Args>
launched launch(const family<void(Params...)>& f, const spec<Policy>& s, Args... args) {
  detail::launch_request r = detail::family_request(f, s);
  return detail::launch_runtime<Params...>(r, std::forward<Args>(args)...);
}

// The plan a family launch would use (its block names the member), without launching.
template <class... Params, class Policy>
const plan& plan_for(const family<void(Params...)>& f, const spec<Policy>& s) {
  return detail::plan_for(detail::family_request(f, s));
}

}  // namespace launchfit

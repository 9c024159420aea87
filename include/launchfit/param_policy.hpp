// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup policies
/// \brief Writing a policy: launchfit::param_policy, register_policy<P>() and the ten-line reference policy
/// launchfit::constant_block_policy (it brings Boost.PFR).
///
// launchfit::param_policy for policy authors: the parameters of a policy are a plain aggregate, and
// Boost.PFR hashes, prints and parses them, so a new policy gets cache keys, log lines and policy-string
// parsing for free. Include this header to write a policy; launching needs only launch.hpp.

#include <boost/pfr.hpp>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "launchfit/export.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {

namespace detail {

template <class T>
std::string field_to_string(const T& v) {
  // Integers take the fast path: a policy string is built on every new plan (a stream costs ~0.2 us each).
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return std::string(std::string_view(v));
  } else {
    std::ostringstream os;
    if constexpr (std::is_floating_point_v<T>) {
      os.precision(std::numeric_limits<T>::max_digits10);  // round-trips through policy strings exactly
    }
    os << v;
    return os.str();
  }
}
}  // namespace detail

// Policy parameters are plain aggregates with a `static constexpr std::array<const char*, N> names`:
// Boost.PFR hashes, compares and prints them, so a new policy gets cache keys, log lines and
// policy-string parsing for free.
template <class Params>
std::string params_to_string(const Params& p) {
  static_assert(std::is_aggregate_v<Params>, "policy parameters must be an aggregate");
  static_assert(Params::names.size() == boost::pfr::tuple_size_v<Params>,
                "Params::names must name every field");
  std::string out;
  out.reserve(64);  // one allocation for the usual few integer parameters, with room for the policy's name
  boost::pfr::for_each_field(p, [&](const auto& field, std::size_t i) {
    if (i) out += ',';
    out += Params::names[i];
    out += '=';
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      char digits[24];  // every 64-bit integer, sign included
      out.append(digits, std::to_chars(digits, digits + sizeof digits, field).ptr);
    } else {
      out += detail::field_to_string(field);
    }
  });
  return out;
}

// A stable hash of a policy's name hash and its parameters' values, field by field.
template <class Params>
std::uint64_t params_hash(std::uint64_t name_hash, const Params& p) {
  std::uint64_t h = name_hash;
  boost::pfr::for_each_field(p, [&](const auto& field) {
    h = detail::mix_hash(h, static_cast<std::uint64_t>(std::hash<std::decay_t<decltype(field)>>{}(field)));
  });
  return h;
}

// Sets fields by name from "k=v" pairs; throws std::invalid_argument naming the bad key or value.
template <class Params>
void params_assign(Params& p, const std::map<std::string, std::string>& kv);

namespace detail {
// What param_policy's name(), params() and hash() are made of.
template <class Derived, class Params>
struct param_policy_members {
  static std::string name() { return Derived::policy_name; }
  static std::string params(const Params& p) { return params_to_string(p); }
  static std::uint64_t hash(const Params& p) {
    static const std::uint64_t name_hash = hash_string(Derived::policy_name);
    return params_hash(name_hash, p);
  }
};
}  // namespace detail

// The reference policy for authors: ten lines, always 128 threads. Register yours with
// register_policy<your_policy>() to make it selectable by name ("your_policy(k=v)").
class LAUNCHFIT_API constant_block_policy final : public param_policy<constant_block_policy, no_params> {
 public:
  static constexpr const char* policy_name = "constant_block";  // its name in policy strings
  using param_policy::param_policy;
  bool builtin() const noexcept override { return true; }  // registered with the built-ins: launchfit ships it

 protected:
  plan choose_impl(const query& q) const override {
    plan p;
    p.block = dims{128, 1, 1};
    p.blocks_per_sm = q.active_blocks_for(128);
    p.reason = "always 128 threads (reference policy)";
    return p;
  }
};

}  // namespace launchfit

#include "launchfit/detail/policy_params.hpp"

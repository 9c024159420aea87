// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief An aggregate's fields as a kernel's arguments (launchfit::args); it brings Boost.PFR, so
/// launchfit.hpp leaves it out.
///
// launchfit::args — an aggregate's fields as a kernel's arguments:
//   struct saxpy_args { float a; const float* x; float* y; int n; };
//   lf::launch(k, lf::max_occupancy().items(n), lf::args(saxpy_args{a, x, y, n}));
// Explicit, so that a struct given on its own is passed as one argument (to a kernel that takes it by value).

#include <array>
#include <boost/pfr.hpp>
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "launchfit/family.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/launch.hpp"

namespace launchfit {

namespace detail {
// Converts to any type, in unevaluated operands only: tells an aggregate of one field by the braces it takes.
struct any_field {
  template <class T>
  operator T() const noexcept;  // NOLINT(google-explicit-constructor): declared, never defined or called
};
template <class T, class = void>
struct takes_one_initializer : std::false_type {};
template <class T>
struct takes_one_initializer<T, std::void_t<decltype(T{std::declval<const any_field&>()})>> : std::true_type {};
template <class T, class = void>
struct takes_two_initializers : std::false_type {};
template <class T>
struct takes_two_initializers<
    T, std::void_t<decltype(T{std::declval<const any_field&>(), std::declval<const any_field&>()})>>
    : std::true_type {};
// A second field that any_field cannot initialise (a std::optional, whose converting constructor and
// any_field's conversion are ambiguous) still takes empty braces.
template <class T, class = void>
struct takes_a_second_field : std::false_type {};
template <class T>
struct takes_a_second_field<T, std::void_t<decltype(T{std::declval<const any_field&>(), {}})>> : std::true_type {};
template <class T>
constexpr bool has_one_field =
    takes_one_initializer<T>::value && !takes_two_initializers<T>::value && !takes_a_second_field<T>::value;

// Calls f with the aggregate's fields in order (Boost.PFR's structure_tie); an aggregate of one field is bound
// here, where nvcc 13's front end does not compile PFR's count of its fields.
template <class Aggregate, class F>
decltype(auto) with_fields(const Aggregate& a, F&& f) {
  if constexpr (has_one_field<Aggregate>) {
    const auto& [only] = a;
    return std::forward<F>(f)(only);
  } else {
    return std::apply(std::forward<F>(f), boost::pfr::structure_tie(a));
  }
}
}  // namespace detail

// A copy of an aggregate whose fields are the arguments (a copy: `auto a = args(saxpy_args{...});` kept for
// later launches holds its fields, where a reference held the temporary it was made from after it died).
template <class Aggregate>
struct packed_args {
  Aggregate fields;  // the aggregate's copy, whose fields are launched
};

// An aggregate's fields as a kernel's arguments: launch(k, spec, args(saxpy_args{a, x, y, n})).
template <class Aggregate>
packed_args<Aggregate> args(const Aggregate& a) {
  static_assert(
      std::is_class_v<Aggregate> && std::is_aggregate_v<Aggregate>,
      "launchfit::args: the kernel's arguments must be the fields of an aggregate (a plain struct)");
  return packed_args<Aggregate>{a};
}

// Runtime-API kernel: the fields, in order, checked and converted as separate arguments would be; returns
// what was launched, like every launch().
template <class... Params, class Policy, class Aggregate>
launched launch(void (*k)(Params...), const spec<Policy>& s, packed_args<Aggregate> a) {
  return detail::with_fields(a.fields, [&](const auto&... field) { return launch(k, s, field...); });
}

// A kernel family: the fields as the member the policy chooses takes them (every member has the family's
// signature); returns what was launched.
template <class... Params, class Policy, class Aggregate>
launched launch(const family<void(Params...)>& f, const spec<Policy>& s, packed_args<Aggregate> a) {
  return detail::with_fields(a.fields, [&](const auto&... field) { return launch(f, s, field...); });
}

// Driver-API kernel: one kernel parameter per field, as separate arguments are passed (sizes checked against
// cuFuncGetParamInfo, a from_plan() field refused at compile time, an aggregate of no field checked as no
// argument); returns what was launched.
template <class Policy, class Aggregate>
launched launch(const kernel& k, const spec<Policy>& s, packed_args<Aggregate> a) {
  return detail::with_fields(a.fields, [&](const auto&... field) { return launch(k, s, field...); });
}

// add_kernel_node() with an aggregate's fields as the arguments, as launch() takes them above: a node of a
// runtime-API kernel or of a driver-API kernel.
template <class... Params, class Policy, class Aggregate>
kernel_node add_kernel_node(cudaGraph_t graph, const node_dependencies& deps, void (*k)(Params...),
                            const spec<Policy>& s, packed_args<Aggregate> a) {
  return detail::with_fields(a.fields,
                             [&](const auto&... field) { return add_kernel_node(graph, deps, k, s, field...); });
}
// The same for a driver-API kernel: one kernel parameter per field, checked as launch() checks them.
template <class Policy, class Aggregate>
kernel_node add_kernel_node(cudaGraph_t graph, const node_dependencies& deps, const kernel& k, const spec<Policy>& s,
                            packed_args<Aggregate> a) {
  return detail::with_fields(a.fields,
                             [&](const auto&... field) { return add_kernel_node(graph, deps, k, s, field...); });
}

}  // namespace launchfit

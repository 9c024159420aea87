// SPDX-License-Identifier: MIT
// The built-in policies' param_policy members (name, parameters, hash) and their registration, compiled
// once here so that policy.hpp and launch.hpp need no Boost.PFR.

#include "launchfit/param_policy.hpp"

namespace launchfit {

template class param_policy<max_occupancy_policy, max_occupancy_params>;
template class param_policy<bytes_in_flight_policy, bytes_in_flight_params>;
template class param_policy<cooperative_policy, cooperative_params>;
template class param_policy<fixed_policy, fixed_params>;
template class param_policy<fixed_dims_policy, fixed_dims_params>;
template class param_policy<planned_policy, planned_params>;
template class param_policy<constant_block_policy, no_params>;

// The registry registers the built-ins by type without the PFR parsing machinery in view.
template void register_policy<max_occupancy_policy>();
template void register_policy<bytes_in_flight_policy>();
template void register_policy<cooperative_policy>();
template void register_policy<fixed_policy>();
template void register_policy<fixed_dims_policy>();
template void register_policy<planned_policy>();
template void register_policy<constant_block_policy>();

}  // namespace launchfit

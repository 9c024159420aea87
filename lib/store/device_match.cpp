// SPDX-License-Identifier: MIT
// Which stored plans may serve a GPU (device_match.hpp).

#include "device_match.hpp"

#include "../plan_file_format.hpp"

namespace launchfit {

bool compatible_driver(int stored_version, int wanted_version) noexcept {
  return stored_version > 0 && wanted_version > 0 && stored_version / 1000 == wanted_version / 1000;
}

bool same_device_model(const stored_key& stored, const stored_key& wanted) noexcept {
  return !stored.device_name.empty() && stored.device_name == wanted.device_name && stored.cc == wanted.cc &&
         stored.sm_count == wanted.sm_count && stored.l2_bytes == wanted.l2_bytes &&
         detail::is_mig_slice(stored) == detail::is_mig_slice(wanted) &&
         compatible_driver(stored.driver_version, wanted.driver_version);
}

namespace detail {

bool is_mig_slice(const stored_key& k) noexcept {
  return k.device_uuid.rfind("MIG-", 0) == 0 || k.device_name.find(" MIG ") != std::string::npos;
}

bool same_model_and_driver(const stored_key& stored, const stored_key& wanted) noexcept {
  return same_device_model(stored, wanted) && stored.driver_version == wanted.driver_version;
}

}  // namespace detail
}  // namespace launchfit

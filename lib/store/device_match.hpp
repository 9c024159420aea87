// SPDX-License-Identifier: MIT
#pragma once
// Internal: which stored plans may serve a GPU. A plan is keyed by one GPU (its UUID) and also serves every
// GPU of the same model, as a match level below the exact GPU. The one definition of "the same model",
// used by the local file, the remote store's key scheme and its lookups, and launchfit-plans.

namespace launchfit {

struct stored_key;  // plan_file_format.hpp

// Whether two drivers (cuDriverGetVersion: 1000 x major + 10 x minor) may share plans across GPUs of one
// model: the same major version. (The exact key still holds the exact driver version.)
bool compatible_driver(int stored_version, int wanted_version) noexcept;
// Whether a plan stored under `stored` may serve `wanted` as another GPU of the same model: the same
// non-empty device name, compute capability, SM count and L2 size, both MIG slices or neither (a UUID
// "MIG-..." or " MIG " in the name), and a compatible driver. Kernel, policy, smem rule and bucket are
// not compared here.
bool same_device_model(const stored_key& stored, const stored_key& wanted) noexcept;

namespace detail {

// Whether the key names a MIG slice (a UUID "MIG-..." or " MIG " in the device name): a slice is a model
// of its own, never the same model as the whole GPU.
bool is_mig_slice(const stored_key& k) noexcept;

// Whether `stored` was written for the model and the exact driver of `wanted` (what one model prefix of
// the remote store holds): same_device_model() with the driver versions equal.
bool same_model_and_driver(const stored_key& stored, const stored_key& wanted) noexcept;

}  // namespace detail
}  // namespace launchfit

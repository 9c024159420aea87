// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief The one include for launching, policies, plans, the cache, logging, the occupancy calculator and
/// plugins.
///
// launchfit — launches sized right on every GPU. One include for launching, policies, plans, the cache and
// logging. Two headers bring Boost.PFR and are included on their own: launchfit/args.hpp (lf::args, an
// aggregate's fields as the kernel's arguments) and launchfit/param_policy.hpp (writing a policy).

#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/family.hpp"
#include "launchfit/graph.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "launchfit/version.hpp"

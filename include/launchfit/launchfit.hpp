#pragma once
// launchfit — launches sized right on every GPU. One include for everything.

#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "launchfit/kernel.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/occupancy.hpp"
#include "launchfit/plan.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"

// SPDX-License-Identifier: MIT
// What a program built against launchfit relies on, across a static or shared library: functions, a
// struct's members, and launchfit::error caught by type with its code.
#include <cstdio>
#include <cstring>
#include <launchfit/launchfit.hpp>
#ifdef LAUNCHFIT_CONSUMER_LOGGER
#include <spdlog/spdlog.h>
#endif

int main() {
  const auto h200 = launchfit::device_limits::for_arch("H200");
  const auto k = launchfit::kernel_resources::manual(40);
  const auto r = launchfit::occupancy(h200, k, 256, 16 * 1024);
  std::printf("%s\n", r.summary().c_str());
  if (r.active_warps_per_sm != 48) return 1;
  try {
    launchfit::device_limits::for_arch("no such part");
    return 2;
  } catch (const launchfit::error& e) {
    if (e.code() != launchfit::errc::unknown_arch) return 3;
  }
  if (!launchfit::logger()) return 4;  // spdlog at work inside launchfit, compiled in or not
  char header_version[32];
  std::snprintf(header_version, sizeof header_version, "%d.%d.%d", LAUNCHFIT_VERSION_MAJOR, LAUNCHFIT_VERSION_MINOR,
                LAUNCHFIT_VERSION_PATCH);
  if (std::strcmp(launchfit::version(), header_version) != 0) return 6;  // the library is the headers' release
#ifdef LAUNCHFIT_CONSUMER_LOGGER
  launchfit::logger()->set_level(spdlog::level::warn);
  if (launchfit::logger()->level() != spdlog::level::warn) return 5;
#endif
  return 0;
}

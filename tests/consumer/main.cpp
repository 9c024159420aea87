#include <launchfit/launchfit.hpp>

#include <cstdio>

int main() {
  const auto h200 = launchfit::device_limits::for_arch("H200");
  const auto k = launchfit::kernel_resources::manual(40);
  const auto r = launchfit::occupancy(h200, k, 256, 16 * 1024);
  std::printf("%s\n", r.summary().c_str());
  return r.active_warps_per_sm == 48 ? 0 : 1;
}

// SPDX-License-Identifier: MIT
#pragma once
// The pure part of launchfit-calibrate: a measured curve of read bandwidth against bytes in flight per SM,
// the smallest bytes-in-flight target that reaches a fraction of the best bandwidth, and the calibration
// file (JSON) that stores both for one device. No CUDA here: everything is tested on the CPU.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace launchfit_calibrate {

// A calibration curve, a calibration file or an argument that cannot be used; the message says why.
struct calibration_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One measured configuration of the streaming read.
struct point {
  int warps_per_sm = 0;                    // resident warps per SM
  int loads_in_flight = 0;                 // independent loads per thread (L)
  int width_bytes = 0;                     // bytes per load (W)
  std::size_t bytes_in_flight_per_sm = 0;  // warps x 32 x W x L
  double gbps = 0;                         // read bandwidth, 10^9 B/s (median of the repetitions)
};

// warps x 32 x width x loads: what a point keeps in flight per SM.
std::size_t bytes_in_flight_of(int warps_per_sm, int loads_in_flight, int width_bytes);

// The bandwidth the target is measured against: the median of the curve's 3 highest bandwidths, i.e. the
// second highest (of 2 points the lower, of 1 point that one). One lucky measurement cannot raise it.
double robust_best_gbps(const std::vector<point>& curve);

// The smallest bytes in flight per SM whose bandwidth reaches `fraction` of the robust best, confirmed by
// one of the next two larger bytes in flight measured (when there are any): one noisy point cannot set the
// target low. Points with the same bytes in flight count with their best bandwidth. Should no level be
// confirmed (a curve that falls after its peak), the smallest that reaches the threshold.
// Throws calibration_error for an empty curve, a point that is not finite, positive and consistent
// (bytes_in_flight_per_sm == warps x 32 x W x L), or a fraction outside (0, 1].
std::size_t smallest_target(const std::vector<point>& curve, double fraction = 0.97);

// What launchfit-calibrate measured on one device, as stored with --out.
struct calibration {
  std::string device_name;  // "NVIDIA H200"
  std::string uuid;         // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int cc = 0;               // compute capability, e.g. 90
  int sm_count = 0;
  int driver_version = 0;       // cudaDriverGetVersion, e.g. 13000
  std::size_t array_bytes = 0;  // bytes read per measurement
  int repeats = 0;              // timed repetitions per point (median)
  double fraction = 0.97;
  double best_gbps = 0;                 // robust_best_gbps(curve)
  std::size_t target_bytes_per_sm = 0;  // smallest_target(curve, fraction)
  std::vector<point> curve;
};

inline constexpr const char* calibration_format = "launchfit-calibration";
inline constexpr int calibration_version = 1;
// Calibration files are small (a few hundred points); anything larger is refused unread.
inline constexpr std::size_t max_calibration_file_bytes = 1 << 20;
inline constexpr std::size_t max_curve_points = 4096;

// The calibration as JSON text (pretty-printed, UTF-8; names that are not valid UTF-8 are replaced).
std::string to_json(const calibration& c);
// Parses and checks a calibration: every field present, of its type and range (at least one SM), the curve
// valid for smallest_target, the target one of the curve's bytes in flight and within the plan cache's bound
// on a stored target (detail::implausible_calibration: 512 B up to what an SM of the architecture holds, at
// most 4 MiB), and the fields consistent with each other (a compute capability of launchfit's architecture
// table, a driver version of that form that knows it, no point with more warps than an SM of it holds, no
// bandwidth its SM count cannot read). Throws calibration_error naming the first problem; unknown fields are
// ignored.
calibration calibration_from_json(std::string_view text);
// Reads a calibration file (a regular file of at most max_calibration_file_bytes); throws calibration_error.
calibration read_calibration(const std::string& path);
// Writes atomically (a temporary file in the same folder, then renamed over `path`); throws
// calibration_error.
void write_calibration(const std::string& path, const calibration& c);

}  // namespace launchfit_calibrate

// SPDX-License-Identifier: MIT
// The pure part of launchfit-calibrate (see calibration.hpp): the target search and the calibration file.

#include "calibration.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "launchfit/device.hpp"
#include "launchfit/error.hpp"
#include "plan_file_format.hpp"

namespace launchfit_calibrate {

namespace {

// Bounds that no real measurement exceeds: anything outside is garbage, not a curve.
constexpr int max_warps_per_sm = 1024;
constexpr int max_loads_in_flight = 1024;
constexpr int max_width_bytes = 1024;
constexpr double max_gbps = 1e6;  // 1 PB/s
constexpr std::size_t max_name_bytes = 256;
constexpr int max_json_depth = 16;

void check_point(const point& p, std::size_t index) {
  const std::string where = "curve point " + std::to_string(index) + ": ";
  if (p.warps_per_sm < 1 || p.warps_per_sm > max_warps_per_sm) {
    throw calibration_error(where + "warps_per_sm must be in 1.." + std::to_string(max_warps_per_sm) +
                            ", got " + std::to_string(p.warps_per_sm));
  }
  if (p.loads_in_flight < 1 || p.loads_in_flight > max_loads_in_flight) {
    throw calibration_error(where + "loads_in_flight must be in 1.." + std::to_string(max_loads_in_flight) +
                            ", got " + std::to_string(p.loads_in_flight));
  }
  if (p.width_bytes < 1 || p.width_bytes > max_width_bytes) {
    throw calibration_error(where + "width_bytes must be in 1.." + std::to_string(max_width_bytes) +
                            ", got " + std::to_string(p.width_bytes));
  }
  const std::size_t expected = bytes_in_flight_of(p.warps_per_sm, p.loads_in_flight, p.width_bytes);
  if (p.bytes_in_flight_per_sm != expected) {
    throw calibration_error(where + "bytes_in_flight_per_sm " + std::to_string(p.bytes_in_flight_per_sm) +
                            " is not warps x 32 x width x loads = " + std::to_string(expected));
  }
  if (!std::isfinite(p.gbps) || p.gbps <= 0 || p.gbps > max_gbps) {
    throw calibration_error(where + "gbps must be a finite bandwidth in (0, 1e6] GB/s");
  }
}

void check_curve(const std::vector<point>& curve) {
  if (curve.empty()) throw calibration_error("the calibration curve is empty");
  if (curve.size() > max_curve_points) {
    throw calibration_error("the calibration curve has " + std::to_string(curve.size()) +
                            " points, more than " + std::to_string(max_curve_points));
  }
  for (std::size_t i = 0; i < curve.size(); ++i) check_point(curve[i], i);
}

// The first driver (CUDA version) that knew a compute capability. What an SM of it holds is launchfit's
// table's (device_limits::for_arch), the one the calculator and the plan cache use. A calibration file is
// checked against both, so that a file edited by hand or copied from another machine cannot claim numbers
// no such device produces.
struct first_driver_of {
  int cc;
  int driver;  // cudaDriverGetVersion of the first CUDA release with the architecture
};
constexpr first_driver_of first_drivers[] = {
    {50, 6000},  {52, 6050},  {53, 7000},   {60, 8000},   {61, 8000},   {62, 8000},
    {70, 9000},  {72, 10000}, {75, 10000},  {80, 11000},  {86, 11010},  {87, 11040},
    {89, 11080}, {90, 11080}, {100, 12080}, {103, 12090}, {120, 12080},
};
// Read bandwidth one SM draws at most: about 34 GB/s on an H200 (4.8 TB/s over 132 SMs), 55 GB/s on a
// B200; six times the highest leaves room for any part to come and still refuses a mistyped SM count.
constexpr double max_gbps_per_sm = 300;
// Most SMs of any part (a B200 has 148).
constexpr int max_sm_count = 1024;

// Checks the device fields and the curve against each other; throws calibration_error naming the first
// contradiction.
void check_consistent(const calibration& c) {
  launchfit::device_limits arch;
  try {
    arch = launchfit::device_limits::for_arch(std::to_string(c.cc));
  } catch (const launchfit::error&) {
    throw calibration_error(
        "device: \"cc\" " + std::to_string(c.cc) +
        " is not a compute capability (major x 10 + minor, e.g. 90 for 9.0) of launchfit's "
        "architecture table");
  }
  int first_driver = 0;
  for (const first_driver_of& f : first_drivers)
    if (f.cc == c.cc) first_driver = f.driver;
  if (c.sm_count > max_sm_count) {
    throw calibration_error("device: \"sm_count\" " + std::to_string(c.sm_count) +
                            " is more than any GPU has (" + std::to_string(max_sm_count) + ")");
  }
  // cudaDriverGetVersion: major x 1000 + minor x 10.
  if (c.driver_version % 10 != 0 || c.driver_version < 1000 || c.driver_version > 99990) {
    throw calibration_error("device: \"driver_version\" " + std::to_string(c.driver_version) +
                            " is not a CUDA driver version (major x 1000 + minor x 10, e.g. 13000)");
  }
  if (c.driver_version < first_driver) {
    throw calibration_error("device: \"driver_version\" " + std::to_string(c.driver_version) +
                            " predates compute capability " + std::to_string(c.cc / 10) + "." +
                            std::to_string(c.cc % 10) + " (first supported by " +
                            std::to_string(first_driver) + ")");
  }
  // The target is stored in the plan cache, which holds it to its own bound (store_calibration): a file the
  // cache would refuse is refused here, with the cache's reason.
  if (const std::string why = launchfit::detail::implausible_calibration(c.target_bytes_per_sm, arch);
      !why.empty()) {
    throw calibration_error("\"target_bytes_per_sm\": " + why);
  }
  const double most_gbps = max_gbps_per_sm * c.sm_count;
  for (std::size_t i = 0; i < c.curve.size(); ++i) {
    const point& p = c.curve[i];
    const std::string where = "curve point " + std::to_string(i) + ": ";
    if (p.warps_per_sm > arch.max_warps_per_sm) {
      throw calibration_error(where + std::to_string(p.warps_per_sm) +
                              " warps per SM, more than an SM of cc " + std::to_string(c.cc) + " holds (" +
                              std::to_string(arch.max_warps_per_sm) + ")");
    }
    if (p.gbps > most_gbps) {
      throw calibration_error(where + std::to_string(p.gbps) + " GB/s is more than " +
                              std::to_string(c.sm_count) + " SMs read (at most " +
                              std::to_string(static_cast<int>(max_gbps_per_sm)) + " GB/s each)");
    }
  }
  if (c.best_gbps > most_gbps) {
    throw calibration_error("\"best_gbps\" " + std::to_string(c.best_gbps) + " is more than " +
                            std::to_string(c.sm_count) + " SMs read");
  }
}

}  // namespace

std::size_t bytes_in_flight_of(int warps_per_sm, int loads_in_flight, int width_bytes) {
  if (warps_per_sm <= 0 || loads_in_flight <= 0 || width_bytes <= 0) return 0;
  return static_cast<std::size_t>(warps_per_sm) * 32u * static_cast<std::size_t>(width_bytes) *
         static_cast<std::size_t>(loads_in_flight);
}

double robust_best_gbps(const std::vector<point>& curve) {
  check_curve(curve);
  std::vector<double> bw;
  bw.reserve(curve.size());
  for (const point& p : curve) bw.push_back(p.gbps);
  std::sort(bw.begin(), bw.end(), std::greater<>());
  // Median of the three highest: the second highest. A single outlier (a timing glitch, a sample that hit
  // L2) is the highest and is ignored; with two points the lower one, with one point itself.
  return bw.size() >= 2 ? bw[1] : bw[0];
}

std::size_t smallest_target(const std::vector<point>& curve, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw calibration_error("fraction must be in (0, 1], got " + std::to_string(fraction));
  }
  const double threshold = fraction * robust_best_gbps(curve);  // validates the curve
  // The best bandwidth measured at each bytes in flight, in increasing order of bytes.
  std::map<std::size_t, double> envelope;
  for (const point& p : curve) {
    double& best = envelope[p.bytes_in_flight_per_sm];
    best = std::max(best, p.gbps);
  }
  const std::vector<std::pair<std::size_t, double>> levels(envelope.begin(), envelope.end());
  std::size_t first_reaching = 0;
  for (std::size_t k = 0; k < levels.size(); ++k) {
    if (levels[k].second < threshold) continue;
    if (first_reaching == 0) first_reaching = levels[k].first;
    // Confirmed when nothing larger was measured, or one of the next two larger levels reaches it too.
    bool confirmed = k + 1 == levels.size();
    for (std::size_t m = k + 1; m < std::min(levels.size(), k + 3); ++m)
      confirmed |= levels[m].second >= threshold;
    if (confirmed) return levels[k].first;
  }
  // No confirmed level (the curve falls right after its peak): the smallest that reaches the threshold,
  // which exists because the robust best never exceeds the highest bandwidth.
  return first_reaching;
}

// ---- the calibration file ----------------------------------------------------------------------------

std::string to_json(const calibration& c) {
  nlohmann::ordered_json j;
  j["format"] = calibration_format;
  j["version"] = calibration_version;
  j["device"] = {{"name", c.device_name},
                 {"uuid", c.uuid},
                 {"cc", c.cc},
                 {"sm_count", c.sm_count},
                 {"driver_version", c.driver_version}};
  j["array_bytes"] = c.array_bytes;
  j["repeats"] = c.repeats;
  j["fraction"] = c.fraction;
  j["best_gbps"] = c.best_gbps;
  j["target_bytes_per_sm"] = c.target_bytes_per_sm;
  nlohmann::ordered_json curve = nlohmann::ordered_json::array();
  for (const point& p : c.curve) {
    curve.push_back({{"warps_per_sm", p.warps_per_sm},
                     {"loads_in_flight", p.loads_in_flight},
                     {"width_bytes", p.width_bytes},
                     {"bytes_in_flight_per_sm", p.bytes_in_flight_per_sm},
                     {"gbps", p.gbps}});
  }
  j["curve"] = std::move(curve);
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

using json = nlohmann::json;

// Nesting depth of JSON text (brackets outside strings), so a hostile file cannot make the parser or the
// value's destructor recurse deeply; stops counting once past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

const json& member(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end()) throw calibration_error(where + "missing field \"" + name + "\"");
  return *it;
}

long long integer_field(const json& obj, const char* name, long long lo, long long hi,
                        const std::string& where) {
  const json& v = member(obj, name, where);
  bool ok = false;
  long long x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    ok = u <= static_cast<std::uint64_t>(std::numeric_limits<long long>::max());
    x = ok ? static_cast<long long>(u) : 0;
  } else if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
    ok = true;
  }
  if (!ok || x < lo || x > hi) {
    throw calibration_error(where + "\"" + name + "\" must be an integer in " + std::to_string(lo) + ".." +
                            std::to_string(hi));
  }
  return x;
}

double number_field(const json& obj, const char* name, const std::string& where) {
  const json& v = member(obj, name, where);
  if (!v.is_number()) throw calibration_error(where + "\"" + name + "\" must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw calibration_error(where + "\"" + name + "\" must be finite");
  return x;
}

std::string string_field(const json& obj, const char* name, const std::string& where) {
  const json& v = member(obj, name, where);
  if (!v.is_string()) throw calibration_error(where + "\"" + name + "\" must be a string");
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_name_bytes) {
    throw calibration_error(where + "\"" + name + "\" is longer than " + std::to_string(max_name_bytes) +
                            " bytes");
  }
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f)
      throw calibration_error(where + "\"" + name + "\" holds a control character");
  }
  return s;
}

constexpr long long max_int = std::numeric_limits<int>::max();
constexpr long long max_bytes_value = 1LL << 40;

}  // namespace

calibration calibration_from_json(std::string_view text) {
  if (text.size() > max_calibration_file_bytes) {
    throw calibration_error("calibration is " + std::to_string(text.size()) + " bytes, more than " +
                            std::to_string(max_calibration_file_bytes));
  }
  if (nesting_depth(text, max_json_depth) > max_json_depth) {
    throw calibration_error("calibration JSON is nested deeper than " + std::to_string(max_json_depth) +
                            " levels");
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw calibration_error("calibration is not valid JSON");
  if (!j.is_object()) throw calibration_error("calibration JSON must be an object");
  const std::string top;
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() ||
      format->get_ref<const std::string&>() != calibration_format) {
    throw calibration_error(std::string("not a calibration file: \"format\" must be \"") +
                            calibration_format + "\"");
  }
  const long long version = integer_field(j, "version", 1, max_int, top);
  if (version != calibration_version) {
    throw calibration_error("calibration file version " + std::to_string(version) +
                            " is not supported (this reads " + std::to_string(calibration_version) + ")");
  }
  calibration c;
  const json& dev = member(j, "device", top);
  if (!dev.is_object()) throw calibration_error("\"device\" must be an object");
  const std::string in_dev = "device: ";
  c.device_name = string_field(dev, "name", in_dev);
  c.uuid = string_field(dev, "uuid", in_dev);
  c.cc = static_cast<int>(integer_field(dev, "cc", 10, 1000, in_dev));
  c.sm_count = static_cast<int>(integer_field(dev, "sm_count", 1, 100000, in_dev));
  c.driver_version = static_cast<int>(integer_field(dev, "driver_version", 0, max_int, in_dev));
  c.array_bytes = static_cast<std::size_t>(integer_field(j, "array_bytes", 1, max_bytes_value, top));
  c.repeats = static_cast<int>(integer_field(j, "repeats", 1, 1000000, top));
  c.fraction = number_field(j, "fraction", top);
  if (!(c.fraction > 0 && c.fraction <= 1)) throw calibration_error("\"fraction\" must be in (0, 1]");
  c.best_gbps = number_field(j, "best_gbps", top);
  if (!(c.best_gbps > 0 && c.best_gbps <= max_gbps))
    throw calibration_error("\"best_gbps\" must be in (0, 1e6]");
  c.target_bytes_per_sm =
      static_cast<std::size_t>(integer_field(j, "target_bytes_per_sm", 1, max_bytes_value, top));

  const json& curve = member(j, "curve", top);
  if (!curve.is_array()) throw calibration_error("\"curve\" must be an array");
  if (curve.size() > max_curve_points) {
    throw calibration_error("\"curve\" has more than " + std::to_string(max_curve_points) + " points");
  }
  bool target_measured = false;
  for (std::size_t i = 0; i < curve.size(); ++i) {
    const json& e = curve[i];
    const std::string where = "curve point " + std::to_string(i) + ": ";
    if (!e.is_object()) throw calibration_error(where + "must be an object");
    point p;
    p.warps_per_sm = static_cast<int>(integer_field(e, "warps_per_sm", 1, max_warps_per_sm, where));
    p.loads_in_flight = static_cast<int>(integer_field(e, "loads_in_flight", 1, max_loads_in_flight, where));
    p.width_bytes = static_cast<int>(integer_field(e, "width_bytes", 1, max_width_bytes, where));
    p.bytes_in_flight_per_sm =
        static_cast<std::size_t>(integer_field(e, "bytes_in_flight_per_sm", 1, max_bytes_value, where));
    p.gbps = number_field(e, "gbps", where);
    check_point(p, i);
    target_measured |= p.bytes_in_flight_per_sm == c.target_bytes_per_sm;
    c.curve.push_back(p);
  }
  check_curve(c.curve);
  if (!target_measured) {
    throw calibration_error("\"target_bytes_per_sm\" " + std::to_string(c.target_bytes_per_sm) +
                            " is not the bytes in flight of any curve point");
  }
  check_consistent(c);
  return c;
}

calibration read_calibration(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a regular file is refused.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw calibration_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  std::string text;
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (static_cast<std::size_t>(st.st_size) > max_calibration_file_bytes) {
    problem = std::to_string(st.st_size) + " bytes, more than " + std::to_string(max_calibration_file_bytes);
  } else {
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        problem = std::string("read failed: ") + std::strerror(errno);
        break;
      }
      if (got == 0) break;
      text.append(buf, static_cast<std::size_t>(got));
      if (text.size() > max_calibration_file_bytes) {  // grew while being read
        problem = "more than " + std::to_string(max_calibration_file_bytes) + " bytes";
        break;
      }
    }
  }
  ::close(fd);
  if (!problem.empty()) throw calibration_error("cannot read calibration " + path + ": " + problem);
  try {
    return calibration_from_json(text);
  } catch (const calibration_error& e) {
    throw calibration_error(path + ": " + e.what());
  }
}

void write_calibration(const std::string& path, const calibration& c) {
  check_curve(c.curve);
  const std::string text = to_json(c);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw calibration_error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed) {
    std::remove(tmp.c_str());
    throw calibration_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw calibration_error("cannot rename " + tmp + " to " + path + ": " + why);
  }
}

}  // namespace launchfit_calibrate

// SPDX-License-Identifier: MIT
// launchfit-calibrate's pure part: the bytes-in-flight target found on a measured curve, and the calibration
// file. The .cpp is compiled in here so the test needs no demo build.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../demos/calibrate/calibration.cpp"
#include "launchfit/device.hpp"

namespace {

namespace cal = launchfit_calibrate;

cal::point at(int warps, int loads, int width, double gbps) {
  return cal::point{warps, loads, width, cal::bytes_in_flight_of(warps, loads, width), gbps};
}

// Saturating read bandwidth, as an H200 shows it: peak x (1 - exp(-bytes / knee)).
double saturating(std::size_t bytes, double peak = 4500, double knee = 9000) {
  return peak * (1 - std::exp(-static_cast<double>(bytes) / knee));
}

// The sweep launchfit-calibrate runs (warps 4..64 x loads 1..8 x widths 4..16 B) on a saturating device.
std::vector<cal::point> sweep(double peak = 4500, double knee = 9000) {
  std::vector<cal::point> c;
  for (int w : {4, 8, 12, 16, 24, 32, 40, 48, 64}) {
    for (int l : {1, 2, 4, 8}) {
      for (int b : {4, 8, 16}) {
        c.push_back(at(w, l, b, saturating(cal::bytes_in_flight_of(w, l, b), peak, knee)));
      }
    }
  }
  return c;
}

// The smallest swept bytes in flight whose bandwidth reaches fraction x peak of the model: the right answer.
std::size_t model_answer(const std::vector<cal::point>& c, double threshold) {
  std::size_t best = std::numeric_limits<std::size_t>::max();
  for (const auto& p : c)
    if (p.gbps >= threshold) best = std::min(best, p.bytes_in_flight_per_sm);
  return best;
}

TEST(CalibrateTarget, BytesInFlightIsWarpsTimes32TimesWidthTimesLoads) {
  EXPECT_EQ(cal::bytes_in_flight_of(32, 2, 16), 32u * 32u * 16u * 2u);
  EXPECT_EQ(cal::bytes_in_flight_of(4, 1, 4), 512u);
  EXPECT_EQ(cal::bytes_in_flight_of(0, 1, 4), 0u);
}

TEST(CalibrateTarget, MonotoneCurveGivesTheFirstLevelReachingTheFraction) {
  const std::vector<cal::point> c = {at(4, 1, 16, 1000),  at(8, 1, 16, 2000),  at(16, 1, 16, 3500),
                                     at(32, 1, 16, 4400), at(64, 1, 16, 4480), at(64, 2, 16, 4500)};
  // Robust best: the second highest, 4480; 97% of it is 4345.6: 32 warps x 16 B (16 KB) is the first.
  EXPECT_DOUBLE_EQ(cal::robust_best_gbps(c), 4480);
  EXPECT_EQ(cal::smallest_target(c), 16384u);
  // A lower fraction takes an earlier level; fraction 1 needs the robust best itself.
  EXPECT_EQ(cal::smallest_target(c, 0.75), 8192u);
  EXPECT_EQ(cal::smallest_target(c, 1.0), 32768u);
}

TEST(CalibrateTarget, FullSweepOfASaturatingDeviceMatchesTheModel) {
  const auto c = sweep();
  const double threshold = 0.97 * cal::robust_best_gbps(c);
  const std::size_t t = cal::smallest_target(c);
  EXPECT_EQ(t, model_answer(c, threshold));
  // On this model 97% of peak needs ln(1 / 0.03) x knee ~ 31.6 KB: the target is the next level measured.
  EXPECT_GE(t, 31000u);
  EXPECT_LE(t, 40u * 1024u);
}

TEST(CalibrateTarget, OrderOfThePointsDoesNotMatter) {
  auto c = sweep();
  const std::size_t t = cal::smallest_target(c);
  std::reverse(c.begin(), c.end());
  EXPECT_EQ(cal::smallest_target(c), t);
  std::rotate(c.begin(), c.begin() + 17, c.end());
  EXPECT_EQ(cal::smallest_target(c), t);
}

TEST(CalibrateTarget, ASingleOutlierBestDoesNotRaiseTheTarget) {
  auto c = sweep();
  const std::size_t clean = cal::smallest_target(c);
  // One sample at twice the peak (it hit L2, or the clock glitched): with the plain best the threshold would
  // be 8730 GB/s, above every honest point, and the target the outlier's own level (or nonsense).
  c.push_back(at(64, 8, 16, 9000));
  EXPECT_LT(cal::robust_best_gbps(c), 4600);
  EXPECT_EQ(cal::smallest_target(c), clean);
  // The same outlier at a small level does not become the target either.
  c.back() = at(4, 1, 8, 9000);
  EXPECT_EQ(cal::smallest_target(c), clean);
}

TEST(CalibrateTarget, ASingleNoisyHighPointAtASmallLevelIsNotConfirmed) {
  const std::vector<cal::point> c = {at(4, 1, 4, 400),    at(4, 1, 8, 4450),   // 1 KB: one lucky sample
                                     at(8, 1, 8, 1400),   at(8, 1, 16, 2400),  // 2 KB, 4 KB: the real curve
                                     at(16, 1, 16, 3700), at(32, 1, 16, 4400),
                                     at(64, 1, 16, 4480), at(64, 2, 16, 4500)};
  EXPECT_EQ(cal::smallest_target(c), 16384u);
}

TEST(CalibrateTarget, NoisyCurveStaysNearTheNoiselessTarget) {
  const auto base = sweep();
  const std::size_t clean = cal::smallest_target(base);
  std::uint64_t s = 42;
  for (int trial = 0; trial < 50; ++trial) {
    auto c = base;
    for (auto& p : c) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
      p.gbps *= 1 + 0.02 * (2 * u - 1);                                    // +-2% timing noise
    }
    const std::size_t t = cal::smallest_target(c);
    EXPECT_GE(t, clean / 2) << "trial " << trial;
    EXPECT_LE(t, clean * 2) << "trial " << trial;
  }
}

TEST(CalibrateTarget, PlateauFromTheStartGivesTheSmallestLevel) {
  std::vector<cal::point> c;
  for (int w : {4, 8, 16, 32, 64}) c.push_back(at(w, 1, 16, 4500 - w));  // flat within 2%
  EXPECT_EQ(cal::smallest_target(c), cal::bytes_in_flight_of(4, 1, 16));
  // A plateau after a ramp: the first plateau level.
  const std::vector<cal::point> r = {at(4, 1, 4, 500),    at(8, 1, 4, 1000),   at(16, 1, 4, 2000),
                                     at(16, 1, 16, 4500), at(32, 1, 16, 4500), at(64, 1, 16, 4500)};
  EXPECT_EQ(cal::smallest_target(r), cal::bytes_in_flight_of(16, 1, 16));
}

TEST(CalibrateTarget, SameBytesInFlightCountsWithItsBestShape) {
  // 16 KB as 32 warps x 16 B (fast) and as 64 warps x 8 B (slow): the level counts as fast.
  const std::vector<cal::point> c = {at(16, 1, 16, 3000), at(64, 1, 8, 2000), at(32, 1, 16, 4450),
                                     at(32, 2, 16, 4500), at(64, 2, 16, 4500)};
  EXPECT_EQ(cal::smallest_target(c), 16384u);
}

TEST(CalibrateTarget, CurveFallingAfterItsPeakStillGivesATarget) {
  const std::vector<cal::point> c = {at(4, 1, 16, 1000), at(16, 1, 16, 4500), at(32, 1, 16, 3000),
                                     at(64, 1, 16, 2500), at(64, 2, 16, 2400)};
  // Best 4500 and the second highest 3000: threshold 2910 is reached first at 8 KB, confirmed by 16 KB.
  EXPECT_EQ(cal::smallest_target(c), cal::bytes_in_flight_of(16, 1, 16));
  // One or two points.
  EXPECT_EQ(cal::smallest_target({at(8, 1, 16, 100)}), cal::bytes_in_flight_of(8, 1, 16));
  EXPECT_EQ(cal::smallest_target({at(8, 1, 16, 100), at(16, 1, 16, 99)}), cal::bytes_in_flight_of(8, 1, 16));
}

TEST(CalibrateTarget, EmptyAndGarbageCurvesAreRefused) {
  EXPECT_THROW(cal::smallest_target({}), cal::calibration_error);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf, 0.0, -5.0, 2e6}) {
    EXPECT_THROW(cal::smallest_target({at(8, 1, 16, 100), at(16, 1, 16, bad)}), cal::calibration_error)
        << bad;
  }
  cal::point inconsistent = at(8, 1, 16, 100);
  inconsistent.bytes_in_flight_per_sm += 1;
  EXPECT_THROW(cal::smallest_target({inconsistent}), cal::calibration_error);
  for (const cal::point& p : {cal::point{0, 1, 16, 0, 100}, cal::point{8, 0, 16, 0, 100},
                              cal::point{8, 1, -4, 0, 100}, cal::point{5000, 1, 4, 640000, 100}}) {
    EXPECT_THROW(cal::smallest_target({p}), cal::calibration_error);
  }
  for (double f : {0.0, -0.5, 1.01, nan}) {
    EXPECT_THROW(cal::smallest_target(sweep(), f), cal::calibration_error) << f;
  }
  EXPECT_THROW(cal::robust_best_gbps({}), cal::calibration_error);
  try {
    cal::smallest_target({});
  } catch (const cal::calibration_error& e) {
    EXPECT_STREQ(e.what(), "the calibration curve is empty");
  }
}

// ---- the calibration file ----------------------------------------------------------------------------

cal::calibration sample() {
  cal::calibration c;
  c.device_name = "NVIDIA H200";
  c.uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  c.cc = 90;
  c.sm_count = 132;
  c.driver_version = 13000;
  c.array_bytes = std::size_t{4} << 30;
  c.repeats = 7;
  c.curve = sweep();
  c.fraction = 0.97;
  c.best_gbps = cal::robust_best_gbps(c.curve);
  c.target_bytes_per_sm = cal::smallest_target(c.curve, c.fraction);
  return c;
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "/launchfit-calibrate-test-" + std::to_string(::getpid()) + "-" + name;
}

TEST(CalibrationFile, RoundTripsEveryField) {
  const cal::calibration c = sample();
  const std::string path = temp_path("round.json");
  cal::write_calibration(path, c);
  const cal::calibration r = cal::read_calibration(path);
  std::remove(path.c_str());
  EXPECT_EQ(r.device_name, c.device_name);
  EXPECT_EQ(r.uuid, c.uuid);
  EXPECT_EQ(r.cc, 90);
  EXPECT_EQ(r.sm_count, 132);
  EXPECT_EQ(r.driver_version, 13000);
  EXPECT_EQ(r.array_bytes, c.array_bytes);
  EXPECT_EQ(r.repeats, 7);
  EXPECT_DOUBLE_EQ(r.fraction, 0.97);
  EXPECT_DOUBLE_EQ(r.best_gbps, c.best_gbps);
  EXPECT_EQ(r.target_bytes_per_sm, c.target_bytes_per_sm);
  ASSERT_EQ(r.curve.size(), c.curve.size());
  for (std::size_t i = 0; i < c.curve.size(); ++i) {
    EXPECT_EQ(r.curve[i].warps_per_sm, c.curve[i].warps_per_sm);
    EXPECT_EQ(r.curve[i].loads_in_flight, c.curve[i].loads_in_flight);
    EXPECT_EQ(r.curve[i].width_bytes, c.curve[i].width_bytes);
    EXPECT_EQ(r.curve[i].bytes_in_flight_per_sm, c.curve[i].bytes_in_flight_per_sm);
    EXPECT_DOUBLE_EQ(r.curve[i].gbps, c.curve[i].gbps);
  }
  EXPECT_EQ(cal::smallest_target(r.curve, r.fraction), r.target_bytes_per_sm);
}

TEST(CalibrationFile, WriteLeavesNoTemporaryFileAndReplacesAnOldOne) {
  const std::string path = temp_path("replace.json");
  { std::ofstream(path) << "old"; }
  cal::write_calibration(path, sample());
  EXPECT_EQ(cal::read_calibration(path).cc, 90);
  EXPECT_NE(::access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), 0);
  std::remove(path.c_str());
  EXPECT_THROW(cal::write_calibration("/nonexistent-dir/x.json", sample()), cal::calibration_error);
  cal::calibration empty = sample();
  empty.curve.clear();
  EXPECT_THROW(cal::write_calibration(path, empty), cal::calibration_error);
}

// The JSON of sample() with one edit applied to its parsed form.
std::string edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(cal::to_json(sample()));
  edit(j);
  return j.dump();
}

void expect_refused(const std::string& text, const std::string& part) {
  try {
    cal::calibration_from_json(text);
    ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  } catch (const cal::calibration_error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(CalibrationFile, GarbageIsRefusedWithTheReason) {
  expect_refused("", "not valid JSON");
  expect_refused("{\"format\":", "not valid JSON");
  expect_refused("[1,2,3]", "must be an object");
  expect_refused("{}", "not a calibration file");
  expect_refused(std::string(40, '[') + std::string(40, ']'), "nested deeper");
  expect_refused(std::string(2 << 20, ' '), "more than");
  expect_refused(edited([](auto& j) { j["format"] = "launchfit-cache"; }), "not a calibration file");
  expect_refused(edited([](auto& j) { j["version"] = 2; }), "version 2 is not supported");
  expect_refused(edited([](auto& j) { j.erase("curve"); }), "missing field \"curve\"");
  expect_refused(edited([](auto& j) { j["curve"] = nlohmann::json::array(); }), "curve is empty");
  expect_refused(edited([](auto& j) { j["curve"] = "many"; }), "must be an array");
  expect_refused(edited([](auto& j) { j["curve"][3]["gbps"] = -1; }), "curve point 3: gbps");
  expect_refused(edited([](auto& j) { j["curve"][3]["gbps"] = "fast"; }), "must be a number");
  expect_refused(edited([](auto& j) { j["curve"][5]["bytes_in_flight_per_sm"] = 12345; }),
                 "is not warps x 32");
  expect_refused(edited([](auto& j) { j["curve"][0]["warps_per_sm"] = 4.5; }), "must be an integer");
  expect_refused(edited([](auto& j) { j["curve"][0] = 7; }), "curve point 0: must be an object");
  expect_refused(edited([](auto& j) { j["target_bytes_per_sm"] = 0; }), "target_bytes_per_sm");
  expect_refused(edited([](auto& j) { j["target_bytes_per_sm"] = 1000; }), "is not the bytes in flight");
  expect_refused(edited([](auto& j) { j["target_bytes_per_sm"] = -4096; }), "target_bytes_per_sm");
  expect_refused(edited([](auto& j) { j["target_bytes_per_sm"] = 18446744073709551615ULL; }),
                 "target_bytes_per_sm");
  expect_refused(edited([](auto& j) { j["fraction"] = 1.5; }), "fraction");
  expect_refused(edited([](auto& j) { j["device"]["cc"] = "9.0"; }), "device: \"cc\"");
  expect_refused(edited([](auto& j) { j["device"]["name"] = std::string(300, 'x'); }), "longer than");
  expect_refused(edited([](auto& j) { j["device"]["uuid"] = "GPU-\x1b[31m"; }), "control character");
  expect_refused(edited([](auto& j) { j["device"] = 1; }), "\"device\" must be an object");
  // Unknown fields are ignored.
  EXPECT_EQ(cal::calibration_from_json(edited([](auto& j) { j["note"] = {{"any", 1}}; })).cc, 90);
}

// The device's fields and the curve must agree with each other: numbers no device of that kind produces
// are a file edited by hand or copied from elsewhere, refused before a target from it is used.
TEST(CalibrationFile, FieldsThatContradictEachOtherAreRefused) {
  expect_refused(edited([](auto& j) { j["device"]["cc"] = 91; }), "\"cc\" 91 is not a compute capability");
  expect_refused(edited([](auto& j) { j["device"]["cc"] = 900; }), "\"cc\" 900 is not a compute capability");
  expect_refused(edited([](auto& j) { j["device"]["sm_count"] = 50000; }), "more than any GPU has");
  expect_refused(edited([](auto& j) { j["device"]["driver_version"] = 0; }), "is not a CUDA driver version");
  expect_refused(edited([](auto& j) { j["device"]["driver_version"] = 12345; }),
                 "is not a CUDA driver version");
  // An H200 (cc 9.0) measured under a driver that predates it.
  expect_refused(edited([](auto& j) { j["device"]["driver_version"] = 11020; }),
                 "11020 predates compute capability 9.0 (first supported by 11080)");
  // More warps per SM than the architecture holds: an sm_89 SM keeps 48.
  expect_refused(edited([](auto& j) { j["device"]["cc"] = 89; }), "more than an SM of cc 89 holds (48)");
  // 4.5 TB/s from 2 SMs.
  expect_refused(edited([](auto& j) { j["device"]["sm_count"] = 2; }), "is more than 2 SMs read");
  // The sample itself is consistent, and so is another real device.
  EXPECT_EQ(cal::calibration_from_json(edited([](auto&) {})).sm_count, 132);
  cal::calibration b200 = cal::calibration_from_json(edited([](auto& j) {
    j["device"]["cc"] = 100;
    j["device"]["sm_count"] = 148;
    j["device"]["driver_version"] = 12080;
  }));
  EXPECT_EQ(b200.cc, 100);
}

// Each device field in a plausible range: at least one SM, a compute capability of launchfit's architecture
// table (the one the calculator and the plan cache use), a driver version of at least 1.0.
TEST(CalibrationFile, DeviceFieldsOutsidePlausibleRangesAreRefused) {
  expect_refused(edited([](auto& j) { j["device"]["sm_count"] = 0; }),
                 "device: \"sm_count\" must be an integer in 1..");
  expect_refused(edited([](auto& j) { j["device"]["sm_count"] = -1; }),
                 "device: \"sm_count\" must be an integer in 1..");
  expect_refused(edited([](auto& j) { j["device"]["cc"] = 0; }), "device: \"cc\"");
  expect_refused(edited([](auto& j) { j["device"]["cc"] = 99; }),
                 "\"cc\" 99 is not a compute capability (major x 10 + minor, e.g. 90 for 9.0) of launchfit's "
                 "architecture table");
  expect_refused(edited([](auto& j) { j["device"]["driver_version"] = -1; }), "device: \"driver_version\"");
  // Every architecture of the table is one a calibration may name.
  for (const auto& arch : launchfit::device_limits::builtin_table()) {
    const int cc = arch.cc();
    const std::string text = edited([&](auto& j) {
      j["device"]["cc"] = cc;
      j["device"]["driver_version"] = 13000;
      // A curve every architecture holds (an SM of cc 7.5 keeps 32 warps).
      nlohmann::json curve = nlohmann::json::array();
      for (const auto& p : j["curve"])
        if (p["warps_per_sm"].template get<int>() <= arch.max_warps_per_sm) curve.push_back(p);
      j["curve"] = curve;
    });
    EXPECT_NO_THROW(cal::calibration_from_json(text)) << arch.arch();
  }
}

// The target is what the plan cache stores (store_calibration): a file is held to the cache's own bound, from
// four warps of 4-byte loads (512 B) to what an SM of its architecture holds (its registers and shared
// memory; never more than 4 MiB), even where the curve measured such a point.
TEST(CalibrationFile, ATargetTheCacheWouldRefuseIsRefused) {
  const auto with_target = [](int warps, int loads, int width) {
    return edited([=](auto& j) {
      const std::size_t bytes = cal::bytes_in_flight_of(warps, loads, width);
      j["curve"].push_back({{"warps_per_sm", warps},
                            {"loads_in_flight", loads},
                            {"width_bytes", width},
                            {"bytes_in_flight_per_sm", bytes},
                            {"gbps", 1000.0}});
      j["target_bytes_per_sm"] = bytes;
    });
  };
  // 2 MiB: above the 484 KiB an SM of sm_90 holds (64 K registers x 4 B + 228 KiB).
  expect_refused(with_target(64, 64, 16),
                 "\"target_bytes_per_sm\": a target of 2097152 B in flight per SM is not in 512..");
  // 8 MiB and 2 GiB: above the cache's bound for any architecture.
  expect_refused(with_target(64, 256, 16), "a target of 8388608 B in flight per SM is not in 512..");
  expect_refused(with_target(64, 1024, 1024), "a target of 2147483648 B in flight per SM is not in 512..");
  // 128 B: one warp of one 4-byte load each, below any useful measurement.
  expect_refused(with_target(1, 1, 4), "a target of 128 B in flight per SM is not in 512..");
  // Within the bound (48 KiB, as CUB's sm_90 table says): kept.
  EXPECT_EQ(cal::calibration_from_json(with_target(48, 2, 16)).target_bytes_per_sm, 48u * 1024);
}

TEST(CalibrationFile, UnreadableFilesAreRefusedWithoutWaiting) {
  EXPECT_THROW(cal::read_calibration(temp_path("missing.json")), cal::calibration_error);
  EXPECT_THROW(cal::read_calibration(::testing::TempDir()), cal::calibration_error);  // a directory
  const std::string fifo = temp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    cal::read_calibration(fifo);  // no writer: must not block
    ADD_FAILURE() << "a FIFO was read";
  } catch (const cal::calibration_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::remove(fifo.c_str());
  const std::string big = temp_path("big.json");
  {
    std::ofstream f(big);
    f << std::string(cal::max_calibration_file_bytes + 1, ' ');
  }
  EXPECT_THROW(cal::read_calibration(big), cal::calibration_error);
  std::remove(big.c_str());
}

}  // namespace

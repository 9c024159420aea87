// SPDX-License-Identifier: MIT
// The rules of the fleet tuning test (tests/gpu/fleet_check.hpp) on synthetic reports: the GPU run only
// produces the reports, so what counts as "one tuner per kernel" and "no trials with files" is checked here.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/fleet_check.hpp"

using launchfit_test::check_no_trials_with_files;
using launchfit_test::check_one_tuner_per_kernel;
using launchfit_test::fleet_report;
using launchfit_test::parse_fleet_report;

namespace {

// N processes x K kernels; process `tuner(k)` tuned kernel k with `trials` timings, the others adopted.
std::vector<fleet_report> fleet(int n, int kernels, int (*tuner)(int), long long trials = 40) {
  std::vector<fleet_report> out;
  for (int p = 0; p < n; ++p)
    for (int k = 0; k < kernels; ++k)
      out.push_back({p, k, p == tuner(k) ? trials : 0, std::to_string(128 << k) + "x8", p == tuner(k) ? 0 : 3,
                     p == tuner(k) ? "computed" : "remote"});
  return out;
}

int tuner_by_kernel(int k) { return k % 3; }

}  // namespace

TEST(FleetReport, ParsesAChildLine) {
  const auto r = parse_fleet_report(3, "kernel=2 trials=41 plan=256x8+full static=0 match=computed");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->process, 3);
  EXPECT_EQ(r->kernel, 2);
  EXPECT_EQ(r->trials, 41);
  EXPECT_EQ(r->plan, "256x8+full");
  EXPECT_EQ(r->match, "computed");
}

TEST(FleetReport, RefusesWhatIsNotOne) {
  EXPECT_FALSE(parse_fleet_report(0, ""));
  EXPECT_FALSE(parse_fleet_report(0, "kernel=2 trials=41 plan=256x8 static=0"));  // a field missing
  EXPECT_FALSE(parse_fleet_report(0, "kernel=2 trials=-1 plan=256x8 static=0 match=x"));
  EXPECT_FALSE(parse_fleet_report(0, "kernel=x trials=1 plan=256x8 static=0 match=x"));
  EXPECT_FALSE(parse_fleet_report(0, "kernel=1 trials=1 plan=256x8 static=0 match=x extra=1"));
}

TEST(FleetCheck, OneTunerPerKernelPasses) {
  const auto v = check_one_tuner_per_kernel(fleet(8, 4, tuner_by_kernel), 8, 4);
  EXPECT_TRUE(v.ok) << v.why;
  EXPECT_EQ(v.tuners, 4);
  EXPECT_EQ(v.total_trials, 4 * 40);  // one tuner's trials per kernel
}

TEST(FleetCheck, TwoTunersOfOneKernelFail) {
  auto reports = fleet(8, 4, tuner_by_kernel);
  reports[5 * 4 + 1].trials = 37;  // process 5 tuned kernel 1 as well
  const auto v = check_one_tuner_per_kernel(reports, 8, 4);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("kernel 1 tuned by 2 processes"), std::string::npos) << v.why;
}

TEST(FleetCheck, AKernelNobodyTunedFails) {
  auto reports = fleet(8, 4, tuner_by_kernel);
  reports[tuner_by_kernel(2) * 4 + 2].trials = 0;
  const auto v = check_one_tuner_per_kernel(reports, 8, 4);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("kernel 2 tuned by 0 processes"), std::string::npos) << v.why;
}

TEST(FleetCheck, DifferentPlansFail) {
  auto reports = fleet(8, 4, tuner_by_kernel);
  reports[7 * 4 + 3].plan = "64x32";
  const auto v = check_one_tuner_per_kernel(reports, 8, 4);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("kernel 3 runs 2 different plans"), std::string::npos) << v.why;
}

TEST(FleetCheck, AMissingOrRepeatedReportFails) {
  auto reports = fleet(8, 4, tuner_by_kernel);
  reports.pop_back();
  EXPECT_FALSE(check_one_tuner_per_kernel(reports, 8, 4).ok);
  reports = fleet(8, 4, tuner_by_kernel);
  reports.push_back(reports.back());
  const auto v = check_one_tuner_per_kernel(reports, 8, 4);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("twice"), std::string::npos) << v.why;
}

TEST(FleetCheck, FilesAfterAnEmptyRestartRunNoTrials) {
  const auto before = fleet(8, 4, tuner_by_kernel);
  auto after = fleet(8, 4, [](int) { return -1; });  // nobody tuned
  for (auto& r : after) r.match = "cache-file";
  auto v = check_no_trials_with_files(after, 8, 4, before);
  EXPECT_TRUE(v.ok) << v.why;
  EXPECT_EQ(v.total_trials, 0);
  after[3].trials = 12;
  v = check_no_trials_with_files(after, 8, 4, before);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("ran 12 trials"), std::string::npos) << v.why;
  after[3].trials = 0;
  after[3].plan = "1024x2";
  v = check_no_trials_with_files(after, 8, 4, before);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("before"), std::string::npos) << v.why;
}

// SPDX-License-Identifier: MIT
// A stored plan's measurement, epoch and origin (plan_file_format.hpp): written and read back in the plan
// file and as a remote store's value, refused when forged out of range, absent in older entries; and the
// one rule of supersession (better_measured).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "plan_file_format.hpp"
#include "store/kv_scheme.hpp"
#include "store_samples.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;

namespace {

const std::string policy_text = launchfit_test::sample_policy;

ld::stored_entry sample() {
  ld::stored_entry e;
  e.key.device_uuid = "GPU-measurement-test";
  e.key.cc = 90;
  e.key.sm_count = 132;
  e.key.driver_version = 12080;
  e.key.kernel = lf::kernel_fingerprint(lf::kernel_resources::manual(32, 0, 1024, "_Z6kernelPf"));
  e.key.policy = policy_text;
  e.key.smem_rule = "bytes=0";
  e.key.device_name = "NVIDIA H200";
  e.key.l2_bytes = 62914560;
  e.plan = launchfit_test::sample_plan(256, policy_text, "");
  e.stored_at_ms = 1700000000000;
  return e;
}

ld::plan_measurement measured(double ms, double spread = 0.02) {
  ld::plan_measurement m;
  m.best_ms = ms;
  m.spread = spread;
  m.trials = 48;
  m.clean = true;
  return m;
}

// The entry's line read back through the file's parser (one entry, nothing skipped).
ld::cache_file_contents reparse(const ld::stored_entry& e) {
  return ld::parse_cache_file(ld::serialize_cache_file({e}));
}

// The line of `e` with `from` replaced by `to` (a forged field), parsed.
ld::cache_file_contents forged(const ld::stored_entry& e, const std::string& from, const std::string& to) {
  std::string text = ld::serialize_cache_file({e});
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " in " << text;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return ld::parse_cache_file(text);
}

TEST(PlanMeasurement, RoundTripsInTheFile) {
  ld::stored_entry e = sample();
  ld::plan_measurement m = measured(0.225, 0.031);
  m.clean = false;
  m.conditions = "other processes on the GPU \"quoted\"";
  e.measurement = m;
  e.epoch = 7;
  e.origin = "redis://cache.example:6379/2";
  const ld::cache_file_contents c = reparse(e);
  ASSERT_EQ(c.entries.size(), 1u) << c.problem;
  const ld::stored_entry& r = c.entries[0];
  ASSERT_TRUE(r.measurement);
  EXPECT_EQ(r.measurement->best_ms, 0.225);
  EXPECT_EQ(r.measurement->spread, 0.031);
  EXPECT_EQ(r.measurement->trials, 48u);
  EXPECT_FALSE(r.measurement->clean);
  EXPECT_EQ(r.measurement->conditions, m.conditions);
  EXPECT_EQ(r.epoch, 7u);
  EXPECT_EQ(r.origin, e.origin);
  EXPECT_EQ(ld::cache_file_line(r), ld::cache_file_line(e));  // byte for byte
}

TEST(PlanMeasurement, RoundTripsAsARemoteValue) {
  ld::stored_entry e = sample();
  e.measurement = measured(1.5);
  e.epoch = 3;
  std::string why;
  const auto r = ld::parse_remote_value(ld::remote_value(e), ld::remote_key(e.key), why);
  ASSERT_TRUE(r) << why;
  ASSERT_TRUE(r->measurement);
  EXPECT_EQ(r->measurement->best_ms, 1.5);
  EXPECT_TRUE(r->measurement->clean);
  EXPECT_EQ(r->epoch, 3u);
}

TEST(PlanMeasurement, OlderEntriesWithoutItReadAsUnmeasured) {
  const ld::stored_entry e = sample();
  const std::string line = ld::cache_file_line(e);
  EXPECT_EQ(line.find("\"measurement\""), std::string::npos);
  EXPECT_EQ(line.find("\"epoch\""), std::string::npos);
  EXPECT_EQ(line.find("\"origin\""), std::string::npos);
  const ld::cache_file_contents c = reparse(e);
  ASSERT_EQ(c.entries.size(), 1u) << c.problem;
  EXPECT_FALSE(c.entries[0].measurement);
  EXPECT_EQ(c.entries[0].epoch, 0u);
  EXPECT_TRUE(c.entries[0].origin.empty());
}

TEST(PlanMeasurement, ForgedFieldsAreRefused) {
  ld::stored_entry e = sample();
  e.measurement = measured(0.5, 0.25);
  e.epoch = 2;
  e.origin = "redis://h:1/0";
  const struct {
    std::string from, to;
  } forgeries[] = {
      {"\"time_ms\":0.5", "\"time_ms\":0"},
      {"\"time_ms\":0.5", "\"time_ms\":-1"},
      {"\"time_ms\":0.5", "\"time_ms\":1e-9"},  // made to win every comparison
      {"\"time_ms\":0.5", "\"time_ms\":1e6"},
      {"\"time_ms\":0.5", "\"time_ms\":1e308"},
      {"\"time_ms\":0.5", "\"time_ms\":\"0.5\""},
      {"\"time_ms\":0.5", "\"time\":0.5"},
      {"\"spread\":0.25", "\"spread\":-0.01"},
      {"\"spread\":0.25", "\"spread\":10.5"},
      {"\"spread\":0.25", "\"spread\":null"},
      {"\"trials\":48", "\"trials\":0"},
      {"\"trials\":48", "\"trials\":1000001"},
      {"\"trials\":48", "\"trials\":-3"},
      {"\"trials\":48", "\"trials\":4.5"},
      {"\"clean\":true", "\"clean\":1"},
      {"\"conditions\":\"\"", "\"conditions\":\"a\\u001b[31mred\""},
      {"\"conditions\":\"\"", "\"conditions\":\"" + std::string(300, 'x') + "\""},
      {"\"conditions\":\"\"", "\"conditions\":7"},
      {"\"epoch\":2", "\"epoch\":-1"},
      {"\"epoch\":2", "\"epoch\":18446744073709551615"},
      {"\"epoch\":2", "\"epoch\":1.5"},
      {"\"origin\":\"redis://h:1/0\"", "\"origin\":\"redis://u:secret@h:1/0\""},
      {"\"origin\":\"redis://h:1/0\"", "\"origin\":\"" + std::string(400, 'o') + "\""},
      {"\"origin\":\"redis://h:1/0\"", "\"origin\":[]"},
  };
  ASSERT_EQ(reparse(e).entries.size(), 1u) << reparse(e).problem;
  for (const auto& f : forgeries) {
    const ld::cache_file_contents c = forged(e, f.from, f.to);
    EXPECT_EQ(c.entries.size(), 0u) << f.to;
    EXPECT_EQ(c.skipped, 1u) << f.to;
    // As a store's value too: the same parser decides.
    std::string text = ld::remote_value(e), why;
    const auto at = text.find(f.from);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, f.from.size(), f.to);
    EXPECT_FALSE(ld::parse_remote_value(text, ld::remote_key(e.key), why)) << f.to;
  }
}

TEST(PlanMeasurement, ValidationHoldsEntriesBuiltElsewhere) {
  ld::stored_entry e = sample();
  EXPECT_EQ(ld::validate_stored_entry(e), "");
  e.measurement = measured(std::numeric_limits<double>::quiet_NaN());
  EXPECT_NE(ld::validate_stored_entry(e), "");
  e.measurement = measured(std::numeric_limits<double>::infinity());
  EXPECT_NE(ld::validate_stored_entry(e), "");
  e.measurement = measured(1, std::numeric_limits<double>::quiet_NaN());
  EXPECT_NE(ld::validate_stored_entry(e), "");
  e.measurement = measured(1);
  EXPECT_EQ(ld::validate_stored_entry(e), "");
  e.origin = "redis://user:pw@h:1";
  EXPECT_NE(ld::validate_stored_entry(e), "");
}

TEST(PlanMeasurement, TheRuleOfSupersession) {
  const auto none = std::optional<ld::plan_measurement>();
  // Unmeasured never replaces anything; measured replaces unmeasured.
  EXPECT_FALSE(ld::better_measured(none, none));
  EXPECT_FALSE(ld::better_measured(none, measured(100)));
  EXPECT_TRUE(ld::better_measured(measured(100), none));
  // Equal, within noise or worse: the stored plan stays.
  EXPECT_FALSE(ld::better_measured(measured(1.0), measured(1.0)));
  EXPECT_FALSE(ld::better_measured(measured(0.99, 0), measured(1.0, 0)));     // 1% is the least noise
  EXPECT_TRUE(ld::better_measured(measured(0.989, 0), measured(1.0, 0)));     // beyond 1%
  EXPECT_FALSE(ld::better_measured(measured(0.95, 0.06), measured(1.0, 0)));  // the candidate's noise
  EXPECT_FALSE(ld::better_measured(measured(0.95, 0), measured(1.0, 0.06)));  // the stored plan's noise
  EXPECT_TRUE(ld::better_measured(measured(0.93, 0.06), measured(1.0, 0.02)));
  EXPECT_FALSE(ld::better_measured(measured(2.0), measured(1.0)));
}

TEST(PlanMeasurement, TheFilesRule) {
  ld::stored_entry stored = sample(), candidate = sample();
  // Unmeasured on disk: anything replaces it (the newest store, as before measurements).
  EXPECT_TRUE(ld::replaces_in_file(candidate, stored));
  stored.measurement = measured(1.0);
  EXPECT_FALSE(ld::replaces_in_file(candidate, stored));  // unmeasured over measured
  candidate.measurement = measured(0.995);
  EXPECT_FALSE(ld::replaces_in_file(candidate, stored));  // within noise
  candidate.measurement = measured(0.5);
  EXPECT_TRUE(ld::replaces_in_file(candidate, stored));
  // Measured under contention: provisional, replaced by any clean measurement, however slow.
  stored.measurement = measured(0.1);
  stored.measurement->clean = false;
  candidate.measurement = measured(5.0);
  EXPECT_TRUE(ld::replaces_in_file(candidate, stored));
  candidate.measurement->clean = false;
  EXPECT_FALSE(ld::replaces_in_file(candidate, stored));  // two unclean ones: the time rule
}

}  // namespace

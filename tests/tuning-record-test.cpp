// SPDX-License-Identifier: MIT
// What a tuning measured and whether it may be shared (lib/tuning_record.hpp), with injected timings and
// injected GPU conditions: a measurement under contention, with a spread above the bound, or both stays local
// and says why; a clean one is shared; unknown conditions are recorded, not a reason to keep a plan local.

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tuning_record.hpp"

namespace lf = launchfit;
using launchfit::detail::max_shared_spread;
using launchfit::detail::plan_measurement;
using launchfit::detail::tuning_record;
namespace nvml = launchfit::detail::nvml;

namespace {

lf::plan plan_of(unsigned block, int bps) {
  lf::plan p;
  p.block = lf::dims{block};
  p.block_threads = static_cast<int>(block);
  p.blocks_per_sm = bps;
  return p;
}

nvml::gpu_conditions quiet() {
  nvml::gpu_conditions c;
  c.known = true;
  c.other_processes = 0;
  return c;
}

nvml::gpu_conditions busy(int others) {
  nvml::gpu_conditions c = quiet();
  c.other_processes = others;
  c.busy_processes = others;
  return c;
}

// A reader that answers `before` for the first read and `after` for later ones, counting reads.
struct scripted {
  nvml::gpu_conditions before, after;
  int reads = 0;
  std::vector<std::uint64_t> since;
  tuning_record::conditions_reader reader() {
    return [this](std::uint64_t since_us) {
      since.push_back(since_us);
      return reads++ == 0 ? before : after;
    };
  }
};

void tune(tuning_record& r, const std::vector<std::pair<lf::plan, double>>& timings) {
  for (const auto& [p, ms] : timings) {
    r.before_trial();
    r.add(p, ms);
  }
}

}  // namespace

TEST(TuningRecord, ACleanMeasurementIsShared) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  tune(
      r,
      {{plan_of(256, 8), 1.00}, {plan_of(128, 16), 1.10}, {plan_of(256, 8), 1.01}, {plan_of(256, 8), 1.005}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  EXPECT_EQ(m->conditions, "");
  EXPECT_DOUBLE_EQ(m->best_ms, 1.005);                             // the lower median of its three timings
  EXPECT_EQ(r.conditions_text(), "spread 1%; 0 other processes");  // recorded even when clean
  EXPECT_NEAR(m->spread, 0.01, 1e-12);                             // (1.01 - 1.00) / 1.00
  EXPECT_EQ(m->trials, 4u);
  EXPECT_EQ(s.reads, 2);  // before the first trial, after the choice
  // Before: the last second's samples; after: those since the first trial began.
  ASSERT_EQ(s.since.size(), 2u);
  EXPECT_GE(s.since[1], s.since[0] + 1000000);
}

// Other processes that only hold a context do not keep a measurement local.
TEST(TuningRecord, IdleOtherProcessesAreNoContention) {
  nvml::gpu_conditions idle = quiet();
  idle.other_processes = 7;
  idle.busy_processes = 0;
  scripted s{idle, idle};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
}

TEST(TuningRecord, ABusyProcessBeforeTuningKeepsItLocal) {
  scripted s{busy(1), quiet()};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions, "1 other process busy on the GPU before tuning");
  EXPECT_EQ(tuning_record::provisional_note(*m),
            "provisional (1 other process busy on the GPU before tuning): kept in the local plan file, not "
            "published "
            "to the remote store");
}

TEST(TuningRecord, ABusyProcessWhileTuningKeepsItLocal) {
  scripted s{quiet(), busy(3)};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions, "3 other processes busy on the GPU while tuning");
}

// Where NVML cannot tell this process's samples from another's (a container lists host PIDs), the trials
// themselves show a GPU shared with another context: host time for gated samples far beyond their GPU time.
namespace {

// What one candidate's gated samples took (tuning_record::add_wait's arguments).
struct waits {
  double gpu_ms, excess_ms;
  int samples;
  bool as_graph = false;
};

// One candidate tuned in `r`, its gated samples as `each` says, measured.
std::optional<plan_measurement> measured_after(tuning_record& r, const std::vector<waits>& each) {
  tune(r, {{plan_of(256, 8), 1.0}});
  for (const waits& w : each) r.add_wait(w.gpu_ms, w.excess_ms, w.samples, w.as_graph);
  return r.measure(plan_of(256, 8));
}

}  // namespace

TEST(TuningRecord, TrialsThatWaitedForTheGpuKeepItLocal) {
  scripted s{quiet(), quiet()};
  // An idle GPU: 40 samples each 0.12 ms past their events (the gate's release, the event's wake-up), one
  // 0.15 ms: 0.85 ms beyond the allowance.
  tuning_record r(s.reader());
  auto m = measured_after(r, {{20.0, 40 * 0.12, 40}, {0.5, 0.15, 1}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  EXPECT_EQ(r.conditions_text(), "spread 0%; waited 0.85 ms beside 20.5 ms of GPU time; 0 other processes");

  // A reset-only microsecond kernel: one launch per sample, 200 samples of 0.01 ms, each 0.03 ms past its
  // events. Summed, the fixed cost is 6 ms beside 2 ms of GPU time: still no wait.
  tuning_record tiny(s.reader());
  m = measured_after(tiny, {{2.0, 6.0, 200}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;

  // Beside a busy process every sample may wait for a time slice: 20 samples, 1.5 ms each.
  tuning_record busy_gpu(s.reader());
  m = measured_after(busy_gpu, {{8.0, 15.0, 10}, {12.0, 15.0, 10}});
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions,
            "the trials waited 28 ms for the GPU beyond their own 20 ms (another context held it)");

  // As long as their own time: not yet a reason.
  tuning_record even(s.reader());
  m = measured_after(even, {{20.0, 20.1, 1}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;

  // Trials timed as graph replays (tune_graph()) say so.
  tuning_record as_graph(s.reader());
  ASSERT_TRUE(measured_after(as_graph, {{20.0, 0.4, 4, true}}));
  EXPECT_TRUE(as_graph.graph_timed());
  EXPECT_FALSE(r.graph_timed());
  EXPECT_EQ(as_graph.conditions_text(), "spread 0%; waited 0 ms beside 20 ms of GPU time; 0 other processes");

  // Short trials: a wait under the floor is no reason, whatever its share.
  tuning_record short_trials(s.reader());
  m = measured_after(short_trials, {{0.5, 2.0, 1}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  // Not a number, negative, no samples or no GPU time: ignored.
  for (const waits& w : std::vector<waits>{{-1.0, 50.0, 1},
                                           {0.0, 50.0, 1},
                                           {1.0, -50.0, 1},
                                           {1.0, 50.0, 0},
                                           {1.0, std::numeric_limits<double>::quiet_NaN(), 1}})
    short_trials.add_wait(w.gpu_ms, w.excess_ms, w.samples);
  m = short_trials.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;

  // Where nothing is stored, the conditions are not read at all.
  scripted unread{busy(2), busy(2)};
  tuning_record skipped(unread.reader());
  skipped.skip_conditions();
  tune(skipped, {{plan_of(256, 8), 1.0}});
  ASSERT_TRUE(skipped.measure(plan_of(256, 8)));
  EXPECT_EQ(unread.reads, 0);
}

// NVML's samples are 1/6 to 1 s long and stamped when recorded: around a tuning of 50 ms they mostly describe
// the time before it (in a fleet, the previous kernel's tuner). Busy processes are a reason beside trials that
// waited for the GPU, whose waits were not measured (the tests above), or under MPS; beside trials that did
// not wait they are noted and the measurement is shared.
TEST(TuningRecord, BusyProcessesCountBesideTrialsThatWaited) {
  // A fleet's previous tuner in the samples before this tuning; 35 ms of trials that waited nothing.
  scripted before{busy(1), quiet()};
  tuning_record r(before.reader());
  auto m = measured_after(r, {{35.0, 40 * 0.1, 40}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  EXPECT_EQ(r.conditions_text(),
            "spread 0%; waited 0 ms beside 35 ms of GPU time; 0 other processes; 1 other process busy on the "
            "GPU before tuning, beside trials that did not wait");
  // The same in the samples while tuning.
  scripted during{quiet(), busy(2)};
  tuning_record r2(during.reader());
  m = measured_after(r2, {{35.0, 0.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  // Beside trials that waited a tenth of their GPU time (under max_shared_wait): kept local, both said.
  scripted shared{busy(1), busy(1)};
  tuning_record r3(shared.reader());
  m = measured_after(r3, {{35.0, 40 * 0.1 + 4.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions,
            "1 other process busy on the GPU before tuning; the trials waited 4 ms for the GPU beyond their own "
            "35 ms (another context held it)");
  // A wait under the floor (0.5 ms) or a tenth of the GPU time is no contention, busy or not.
  tuning_record r4(shared.reader());
  m = measured_after(r4, {{35.0, 40 * 0.1 + 3.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  // Under MPS another process's kernels run beside the trials, which wait for none of them: busy while
  // tuning counts alone; busy before tuning alone (the fleet's previous tuner there too) does not.
  nvml::gpu_conditions shared_mps = busy(1);
  shared_mps.mps = true;
  nvml::gpu_conditions quiet_mps = quiet();
  quiet_mps.mps = true;
  scripted mps{quiet_mps, shared_mps};
  tuning_record r6(mps.reader());
  m = measured_after(r6, {{35.0, 0.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions, "1 other process busy on the GPU while tuning");
  scripted mps_before{shared_mps, quiet_mps};
  tuning_record r7(mps_before.reader());
  m = measured_after(r7, {{35.0, 0.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
  // A GPU that slowed itself down is a reason whatever the waits.
  nvml::gpu_conditions hot = quiet();
  hot.throttle_read = true;
  hot.throttle = 0x40;
  scripted slowed{hot, quiet()};
  tuning_record r5(slowed.reader());
  m = measured_after(r5, {{35.0, 0.0, 40}});
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions, "the GPU slowed itself down (throttle reasons 0x40) before tuning");
}

TEST(TuningRecord, ASpreadAboveTheBoundKeepsItLocal) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  // 128x16's re-timings spread by 8%: the bound is the largest spread of any re-timed candidate.
  tune(r,
       {{plan_of(256, 8), 1.0}, {plan_of(128, 16), 1.00}, {plan_of(128, 16), 1.08}, {plan_of(256, 8), 1.0}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_NEAR(m->spread, 0.08, 1e-12);
  EXPECT_EQ(m->conditions, "re-timings spread by 8%, above the 5% bound");
}

TEST(TuningRecord, ASpreadWithinTheBoundIsShared) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}, {plan_of(256, 8), 1.0 + 0.8 * max_shared_spread}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean) << m->conditions;
}

TEST(TuningRecord, ContentionAndSpreadAreBothSaid) {
  scripted s{busy(2), busy(2)};
  tuning_record r(s.reader());
  tune(r, {{plan_of(64, 32), 0.5}, {plan_of(64, 32), 0.6}});
  const auto m = r.measure(plan_of(64, 32));
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->conditions,
            "2 other processes busy on the GPU before tuning; re-timings spread by 20%, above the 5% bound");
}

TEST(TuningRecord, UnknownConditionsAreRecordedAndShared) {
  nvml::gpu_conditions unknown;
  unknown.unknown = "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver's NVML here)";
  scripted s{unknown, unknown};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}});
  const auto m = r.measure(plan_of(256, 8));
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->clean);
  EXPECT_EQ(m->conditions, "GPU conditions unknown: " + unknown.unknown);
}

TEST(TuningRecord, NoMeasurementForAPlanNeverTimed) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  EXPECT_FALSE(r.tuned());
  EXPECT_FALSE(r.measure(plan_of(256, 8)));
  tune(r, {{plan_of(256, 8), 1.0}, {plan_of(512, 4), -1}});
  EXPECT_TRUE(r.tuned());
  EXPECT_FALSE(r.measure(plan_of(512, 4)));   // could not run
  EXPECT_FALSE(r.measure(plan_of(128, 16)));  // never timed
  EXPECT_EQ(s.reads, 1);                      // a measure() that finds nothing reads nothing
}

TEST(TuningRecord, ConditionsAreReadOnceBeforeTrials) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  tune(r, {{plan_of(256, 8), 1.0}, {plan_of(128, 16), 1.0}, {plan_of(512, 4), 1.0}});
  EXPECT_EQ(s.reads, 1);
}

// The trial gate (the tuning lease) is asked once, at the first trial: a refusal holds for every later trial.
TEST(TuningRecord, TheTrialGateIsAskedOnceAtTheFirstTrial) {
  scripted s{quiet(), quiet()};
  tuning_record free_record(s.reader());
  EXPECT_TRUE(free_record.allow_trial());  // no gate: every trial allowed
  EXPECT_FALSE(free_record.trials_refused());

  tuning_record r(s.reader());
  int asked = 0;
  r.set_trial_gate([&] {
    ++asked;
    return false;
  });
  EXPECT_FALSE(r.trials_refused());  // not asked before the first trial
  EXPECT_EQ(asked, 0);
  EXPECT_FALSE(r.allow_trial());
  EXPECT_FALSE(r.allow_trial());
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(r.trials_refused());
  EXPECT_FALSE(r.tuned());

  tuning_record allowed(s.reader());
  allowed.set_trial_gate([&] {
    ++asked;
    return true;
  });
  // The call that asks the gate says so (its time is the tuning's setup, query::setup_ms); later ones do not.
  bool did = false;
  EXPECT_TRUE(allowed.allow_trial(&did));
  EXPECT_TRUE(did);
  did = false;
  EXPECT_TRUE(allowed.allow_trial(&did));
  EXPECT_FALSE(did);
  EXPECT_EQ(asked, 2);
  EXPECT_FALSE(allowed.trials_refused());
  // The same for the conditions: the first call reads them, where a reader is set.
  EXPECT_TRUE(allowed.before_trial());
  EXPECT_FALSE(allowed.before_trial());
  tuning_record unread(s.reader());
  unread.skip_conditions();
  EXPECT_FALSE(unread.before_trial());
}

// The trials' setup runs once, before the policy is asked, and reads no GPU conditions (those are read at the
// first trial, after the fleet's lease). A setup that throws (no thread could start, no pinned memory) is
// swallowed: the first trial makes the gate again, and the launch never fails for it.
TEST(TuningRecord, TheTrialsSetupRunsOnceReadsNothingAndNeverThrows) {
  scripted s{quiet(), quiet()};
  tuning_record r(s.reader());
  r.prepare_trials();  // nothing given: nothing done
  int runs = 0;
  r.set_trial_setup([&runs] { ++runs; });
  r.prepare_trials();
  r.prepare_trials();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(s.reads, 0) << "the GPU's conditions were read before the first trial";

  tuning_record failing(s.reader());
  failing.set_trial_setup(
      [] { throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again)); });
  EXPECT_NO_THROW(failing.prepare_trials());
  tune(failing, {{plan_of(256, 8), 1.0}});
  EXPECT_TRUE(failing.tuned());
}

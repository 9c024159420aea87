// SPDX-License-Identifier: MIT
#pragma once
// What the fleet tuning test (fleet-tuning-test.cu) and its benchmark script check, as pure logic over the
// processes' reports, so that the rules are tested on the CPU (tests/fleet-check-test.cpp) and the GPU run
// only produces the reports.
//
// A report line, one per process and kernel, as a child writes it:
//   kernel=<k> trials=<n> plan=<block>x<blocks per SM>[+full] static=<launches> match=<match>
// trials: the timings this process made for the kernel (0 when its plan came from a store or another
// process); static: launches that ran the static plan while another process tuned; match: the final plan's.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace launchfit_test {

struct fleet_report {
  int process = -1;
  int kernel = -1;
  long long trials = -1;
  std::string plan;
  long long static_launches = 0;
  std::string match;
};

// One line of a child, or nullopt when it is not one (every field present, numbers non-negative).
inline std::optional<fleet_report> parse_fleet_report(int process, const std::string& line) {
  fleet_report r;
  r.process = process;
  std::istringstream in(line);
  std::string field;
  int seen = 0;
  while (in >> field) {
    const std::size_t eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    try {
      if (k == "kernel") {
        r.kernel = std::stoi(v);
      } else if (k == "trials") {
        r.trials = std::stoll(v);
      } else if (k == "plan") {
        r.plan = v;
      } else if (k == "static") {
        r.static_launches = std::stoll(v);
      } else if (k == "match") {
        r.match = v;
      } else {
        return std::nullopt;
      }
    } catch (...) {
      return std::nullopt;
    }
    ++seen;
  }
  if (seen != 5 || r.kernel < 0 || r.trials < 0 || r.plan.empty() || r.static_launches < 0)
    return std::nullopt;
  return r;
}

struct fleet_verdict {
  bool ok = true;
  std::string why;             // every rule broken, "; "-separated
  long long total_trials = 0;  // over every process and kernel
  int tuners = 0;              // (process, kernel) pairs that ran trials
  void fail(const std::string& s) {
    ok = false;
    why += (why.empty() ? "" : "; ") + s;
  }
};

// Every process reported every kernel once.
inline void check_complete(const std::vector<fleet_report>& reports, int processes, int kernels,
                           fleet_verdict& v) {
  std::set<std::pair<int, int>> seen;
  for (const fleet_report& r : reports)
    if (!seen.insert({r.process, r.kernel}).second)
      v.fail("process " + std::to_string(r.process) + " reported kernel " + std::to_string(r.kernel) +
             " twice");
  if (static_cast<long long>(seen.size()) != 1LL * processes * kernels)
    v.fail(std::to_string(seen.size()) + " reports of " + std::to_string(1LL * processes * kernels) +
           " expected");
}

// Every process runs one plan per kernel (the same across processes).
inline void check_identical(const std::vector<fleet_report>& reports, fleet_verdict& v) {
  std::map<int, std::set<std::string>> plans;
  for (const fleet_report& r : reports) plans[r.kernel].insert(r.plan);
  for (const auto& [k, p] : plans)
    if (p.size() != 1)
      v.fail("kernel " + std::to_string(k) + " runs " + std::to_string(p.size()) + " different plans");
}

// N processes started at once with an empty store: exactly one process tunes each kernel, every process
// ends with the same plan, and the trials in all are the tuners' own (no other process timed anything).
inline fleet_verdict check_one_tuner_per_kernel(const std::vector<fleet_report>& reports, int processes,
                                                int kernels) {
  fleet_verdict v;
  check_complete(reports, processes, kernels, v);
  check_identical(reports, v);
  std::map<int, int> tuners;
  for (const fleet_report& r : reports) {
    v.total_trials += r.trials;
    if (r.trials > 0) {
      ++tuners[r.kernel];
      ++v.tuners;
    }
  }
  for (int k = 0; k < kernels; ++k)
    if (tuners[k] != 1)
      v.fail("kernel " + std::to_string(k) + " tuned by " + std::to_string(tuners[k]) + " processes");
  return v;
}

// After the store restarted empty, processes with their own plan files run no trial and the same plans as
// `before` (the first phase's reports).
inline fleet_verdict check_no_trials_with_files(const std::vector<fleet_report>& reports, int processes,
                                                int kernels, const std::vector<fleet_report>& before) {
  fleet_verdict v;
  check_complete(reports, processes, kernels, v);
  check_identical(reports, v);
  std::map<int, std::string> earlier;
  for (const fleet_report& r : before) earlier[r.kernel] = r.plan;
  for (const fleet_report& r : reports) {
    v.total_trials += r.trials;
    if (r.trials > 0)
      v.fail("process " + std::to_string(r.process) + " ran " + std::to_string(r.trials) +
             " trials for kernel " + std::to_string(r.kernel));
    if (earlier.count(r.kernel) && earlier[r.kernel] != r.plan)
      v.fail("kernel " + std::to_string(r.kernel) + " runs " + r.plan + ", before " + earlier[r.kernel]);
  }
  return v;
}

}  // namespace launchfit_test

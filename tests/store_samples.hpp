// SPDX-License-Identifier: MIT
#pragma once
// What the plan-store tests (remote-store, fleet-store, lease, plan-file-format, plan-measurement) store and
// where: one shape of key and plan, a device model of each test's own, and the Redis server tests/run.sh
// started (LAUNCHFIT_TEST_REDIS); and how a check fails inside a forked child (CHECK_IN_CHILD).

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "launchfit/cache.hpp"
#include "launchfit/kernel.hpp"
#include "store/kv_scheme.hpp"
#include "store/remote_layer.hpp"

namespace launchfit_test {

inline constexpr const char* sample_policy = "max_occupancy(prefer_block=256,block_limit=0)";
// Its text in a key, as launchfit 0.4 stores it: the work's kind named.
inline const std::string sample_key_policy = std::string(sample_policy) + " work=items";

// A device model no other test or process uses, so that tests sharing one server never see each other.
inline std::string unique_model(const std::string& prefix, const std::string& what) {
  return prefix + " " + std::to_string(::getpid()) + " " + what + " " +
         testing::UnitTest::GetInstance()->current_test_info()->name();
}

// The key of kernel number `kernel` on a GPU of `model` (a UUID names one GPU, so no two models share one).
inline launchfit::stored_key sample_key(const std::string& model, int kernel, std::uint64_t bucket = 0,
                                        const std::string& policy = sample_key_policy) {
  launchfit::stored_key k;
  k.device_uuid = "GPU-" + std::to_string(std::hash<std::string>{}(model)) + "-" + std::to_string(kernel);
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = launchfit::kernel_fingerprint(
      launchfit::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(kernel) + "Pf"));
  k.policy = policy;
  k.smem_rule = "bytes=0";
  k.bucket = bucket;
  k.device_name = model;
  k.l2_bytes = 62914560;
  return k;
}

// A plan of `block` threads in a row, as `policy` made it.
inline launchfit::plan sample_plan(int block, const std::string& policy = sample_policy,
                                   const std::string& reason = "sample") {
  launchfit::plan p;
  p.block = launchfit::dims{static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = std::min(2048 / block, 32);  // an SM of sm_90 holds 2048 threads in 32 blocks
  p.sm_count = 132;
  p.policy = policy;
  p.reason = reason;
  return p;
}

// The server tests/run.sh started, if any.
inline std::optional<launchfit::detail::remote_url> test_server() {
  const char* v = std::getenv("LAUNCHFIT_TEST_REDIS");
  if (!v || !*v) return std::nullopt;
  std::string why;
  return launchfit::detail::parse_remote_url(v, why);
}

// A store of the test's own. Its bounds are generous: these tests assert what stores share, and a host
// loaded enough to starve a process for 200 ms would make a lookup fail open (the fault tests assert the
// bounds).
inline constexpr unsigned test_connect_ms = 2000, test_op_ms = 5000;
inline launchfit::detail::remote_options test_store_options(const launchfit::detail::remote_url& url) {
  launchfit::detail::remote_options o;
  o.url = url;
  o.connect_timeout_ms = test_connect_ms;
  o.op_timeout_ms = test_op_ms;
  return o;
}

}  // namespace launchfit_test

// Skips a test when no server was started for the tests.
#define NEEDS_REDIS(url)                                                                          \
  const std::optional<launchfit::detail::remote_url> url = launchfit_test::test_server();         \
  if (!url)                                                                                       \
  GTEST_SKIP() << "LAUNCHFIT_TEST_REDIS is not set: tests/run.sh starts a redis-server and sets " \
                  "it"

// A failed check inside a forked body: print it and make the child's exit code say so.
#define CHECK_IN_CHILD(cond)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

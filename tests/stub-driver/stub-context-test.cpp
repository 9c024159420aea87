// SPDX-License-Identifier: MIT
// The current context's identity on the hit path: cuCtxGetId(NULL) in one driver call where the driver
// answers it for the current context, checked once against the handle's identity; a driver that answers
// otherwise (another identity, or an error) is asked the long way (cuCtxGetCurrent + cuCtxGetId) on every
// launch, and the plans are keyed by the handle's identity, never by what NULL answered. The answer is the
// process's first launch's: ctest runs this binary once per answer (LAUNCHFIT_STUB_NULL_CONTEXT_ID = 0, 1 or
// 2, the stub's launchfit_stub_answer_null_context_id).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "stub_driver.h"

namespace lf = launchfit;

namespace {

const std::size_t axpy_params[] = {sizeof(float), sizeof(void*), sizeof(void*), sizeof(int)};

int null_answer() {
  const char* v = std::getenv("LAUNCHFIT_STUB_NULL_CONTEXT_ID");
  return v ? std::atoi(v) : 0;
}

float* device_pointer(std::uintptr_t n) { return reinterpret_cast<float*>(n); }

// Launches `name` once (the miss), then `launches` times; returns the driver calls of the hit path.
struct hit_calls {
  unsigned long long total, current, id, launches;
};
hit_calls hit_path_calls(const char* name, int launches) {
  const CUfunction f = launchfit_stub_function(name, 16, 0, 1024, axpy_params, 4);
  const lf::kernel k(f);
  const auto spec = lf::max_occupancy().items(1 << 16).on(reinterpret_cast<CUstream>(0x31));
  lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  launchfit_stub_reset_calls();
  for (int i = 0; i < launches; ++i)
    lf::launch(k, spec, 1.0f, device_pointer(0x1000), device_pointer(0x2000), 1 << 16);
  return {launchfit_stub_total_calls(), launchfit_stub_calls("cuCtxGetCurrent"),
          launchfit_stub_calls("cuCtxGetId"), launchfit_stub_calls("cuLaunchKernelEx")};
}

// The contexts the cache's plans of `kernel` are keyed by.
std::vector<std::uint64_t> contexts_of(const std::string& kernel) {
  std::vector<std::uint64_t> out;
  for (const auto& p : lf::cache().plans())
    if (p.kernel == kernel) out.push_back(p.key.context);
  return out;
}

class NullContextId : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { launchfit_stub_answer_null_context_id(null_answer()); }
};

}  // namespace

// First, so that the answer is decided by threads that launch at once: whatever NULL answers, they agree on
// the context and on the plan.
TEST_F(NullContextId, ThreadsThatDecideAtOnceAgree) {
  const CUfunction f = launchfit_stub_function("racing", 16, 0, 1024, axpy_params, 4);
  const lf::kernel k(f);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        lf::launch(k, lf::max_occupancy().items(1 << 12), 1.0f, device_pointer(0x1000),
                   device_pointer(0x2000), 1 << 12);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(contexts_of("racing"), std::vector<std::uint64_t>{1});
}

TEST_F(NullContextId, ADriverThatAnswersForTheCurrentContextIsAskedOnce) {
  if (null_answer() != 0) GTEST_SKIP() << "the stub answers NULL otherwise in this run";
  const hit_calls c = hit_path_calls("documented", 500);
  EXPECT_EQ(c.launches, 500u);
  EXPECT_EQ(c.id, 500u);
  EXPECT_EQ(c.current, 0u);
  EXPECT_EQ(c.total, 1000u);
  EXPECT_EQ(contexts_of("documented"), std::vector<std::uint64_t>{1});
}

TEST_F(NullContextId, ADriverThatAnswersAnotherIdentityIsAskedTheLongWay) {
  if (null_answer() != 2) GTEST_SKIP() << "run with LAUNCHFIT_STUB_NULL_CONTEXT_ID=2";
  const hit_calls c = hit_path_calls("other_identity", 500);
  EXPECT_EQ(c.launches, 500u);
  EXPECT_EQ(c.current, 500u);
  EXPECT_EQ(c.id, 500u) << "asked with NULL after the driver's answer was found wrong";
  // Keyed by the handle's identity (1), never by NULL's answer (99).
  EXPECT_EQ(contexts_of("other_identity"), std::vector<std::uint64_t>{1});
}

TEST_F(NullContextId, ADriverThatRefusesNullIsAskedTheLongWay) {
  if (null_answer() != 1) GTEST_SKIP() << "run with LAUNCHFIT_STUB_NULL_CONTEXT_ID=1";
  const hit_calls c = hit_path_calls("refused_null", 500);
  EXPECT_EQ(c.launches, 500u);
  EXPECT_EQ(c.current, 500u);
  EXPECT_EQ(c.id, 1000u);  // NULL (refused), then the handle
  EXPECT_EQ(contexts_of("refused_null"), std::vector<std::uint64_t>{1});
}

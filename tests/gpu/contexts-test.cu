// SPDX-License-Identifier: MIT
// Plans are per context: two contexts on one device each get their own plan, and a green context with a
// subset of the SMs gets grids sized for its SMs (cooperative grids included).

#include <gtest/gtest.h>

#include <vector>

#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

#define LF_CU_CHECK(expr)                                    \
  do {                                                       \
    const CUresult lf_r_ = (expr);                           \
    ASSERT_EQ(lf_r_, CUDA_SUCCESS) << #expr << " -> " << lf_r_; \
  } while (0)

struct driver_calls {
  decltype(&::cuCtxCreate) ctx_create = LF_DRIVER(cuCtxCreate);
  decltype(&::cuCtxDestroy) ctx_destroy = LF_DRIVER(cuCtxDestroy);
  decltype(&::cuCtxSetCurrent) set_current = LF_DRIVER(cuCtxSetCurrent);
  decltype(&::cuCtxGetCurrent) get_current = LF_DRIVER(cuCtxGetCurrent);
  decltype(&::cuMemAlloc) mem_alloc = LF_DRIVER(cuMemAlloc);
  decltype(&::cuMemFree) mem_free = LF_DRIVER(cuMemFree);
  decltype(&::cuMemsetD32) memset32 = LF_DRIVER(cuMemsetD32);
  decltype(&::cuMemcpyDtoH) dtoh = LF_DRIVER(cuMemcpyDtoH);
  decltype(&::cuCtxSynchronize) sync = LF_DRIVER(cuCtxSynchronize);
  decltype(&::cuDeviceGetDevResource) dev_resource = LF_DRIVER(cuDeviceGetDevResource);
  decltype(&::cuDevSmResourceSplitByCount) split = LF_DRIVER(cuDevSmResourceSplitByCount);
  decltype(&::cuDevResourceGenerateDesc) gen_desc = LF_DRIVER(cuDevResourceGenerateDesc);
  decltype(&::cuGreenCtxCreate) green_create = LF_DRIVER(cuGreenCtxCreate);
  decltype(&::cuGreenCtxDestroy) green_destroy = LF_DRIVER(cuGreenCtxDestroy);
  decltype(&::cuCtxFromGreenCtx) from_green = LF_DRIVER(cuCtxFromGreenCtx);
};

// Launches count_blocks with `spec` in the current context; returns {blocks that ran, gridDim.x seen}.
template <class Spec>
std::pair<unsigned, unsigned> count_blocks_here(const driver_calls& d, const lf::kernel& k, const Spec& spec) {
  CUdeviceptr buf = 0;
  std::pair<unsigned, unsigned> out{0, 0};
  if (d.mem_alloc(&buf, 2 * sizeof(unsigned)) != CUDA_SUCCESS) return out;
  d.memset32(buf, 0, 2);
  unsigned* blocks = reinterpret_cast<unsigned*>(buf);
  unsigned* grid_seen = blocks + 1;
  lf::launch(k, spec, blocks, grid_seen);
  unsigned h[2] = {0, 0};
  if (d.sync() == CUDA_SUCCESS && d.dtoh(h, buf, sizeof h) == CUDA_SUCCESS) out = {h[0], h[1]};
  d.mem_free(buf);
  return out;
}

class Contexts : public ::testing::Test {
 protected:
  void SetUp() override {
    LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // primary context current
    ASSERT_TRUE(d.ctx_create && d.set_current && d.mem_alloc) << "driver entry points missing";
  }
  driver_calls d;
};

}  // namespace

TEST_F(Contexts, TwoContextsOnOneDeviceGetTheirOwnPlans) {
  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("count_blocks");
  CUcontext primary = nullptr, second = nullptr;
  LF_CU_CHECK(d.get_current(&primary));
  LF_CU_CHECK(d.ctx_create(&second, nullptr, 0, 0));
  const std::size_t before = lf::cache().size();
  LF_CU_CHECK(d.set_current(primary));
  const auto a = count_blocks_here(d, k, lf::fixed(128).items(128 * 50));
  LF_CU_CHECK(d.set_current(second));
  const auto b = count_blocks_here(d, k, lf::fixed(128).items(128 * 50));
  LF_CU_CHECK(d.set_current(primary));
  const auto c = count_blocks_here(d, k, lf::fixed(128).items(128 * 50));
  EXPECT_EQ(a, std::make_pair(50u, 50u));
  EXPECT_EQ(b, std::make_pair(50u, 50u));
  EXPECT_EQ(c, std::make_pair(50u, 50u));
  EXPECT_EQ(lf::cache().size(), before + 2);  // one plan per context, reused when switching back
  std::vector<std::uintptr_t> contexts;
  for (const auto& p : lf::cache().plans())
    if (p.kernel == "count_blocks") contexts.push_back(p.key.context);
  ASSERT_EQ(contexts.size(), 2u);
  EXPECT_NE(contexts[0], contexts[1]);
  LF_CU_CHECK(d.ctx_destroy(second));
  LF_CU_CHECK(d.set_current(primary));
}

TEST_F(Contexts, GreenContextGridsAreSizedForItsSms) {
  if (!d.dev_resource || !d.split || !d.gen_desc || !d.green_create || !d.from_green)
    GTEST_SKIP() << "driver lacks green contexts";
  CUdevResource all{};
  LF_CU_CHECK(d.dev_resource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  LF_CU_CHECK(d.split(&part, &groups, &all, &rest, 0, 16));
  ASSERT_EQ(groups, 1u);
  CUdevResourceDesc desc{};
  LF_CU_CHECK(d.gen_desc(&desc, &part, 1));
  CUgreenCtx green = nullptr;
  LF_CU_CHECK(d.green_create(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CUcontext gctx = nullptr, primary = nullptr;
  LF_CU_CHECK(d.from_green(&gctx, green));
  LF_CU_CHECK(d.get_current(&primary));

  lf::module m = lf::module::from_file(LAUNCHFIT_TEST_CUBIN);
  const lf::kernel k = m.get("count_blocks");
  const auto full = count_blocks_here(d, k, lf::cooperative());
  LF_CU_CHECK(d.set_current(gctx));
  const auto green_run = count_blocks_here(d, k, lf::cooperative());
  const lf::plan& gp = lf::plan_for(k, lf::cooperative());
  LF_CU_CHECK(d.set_current(primary));
  const lf::plan& fp = lf::plan_for(k, lf::cooperative());

  EXPECT_EQ(gp.sm_count, static_cast<int>(part.sm.smCount));
  EXPECT_EQ(fp.sm_count, static_cast<int>(all.sm.smCount));
  EXPECT_EQ(green_run.second, static_cast<unsigned>(gp.resident_blocks()));
  EXPECT_EQ(green_run.first, green_run.second);
  EXPECT_EQ(full.second, static_cast<unsigned>(fp.resident_blocks()));
  EXPECT_LT(green_run.second, full.second);
  std::printf("green context: %u SMs -> cooperative grid %u; full device: %u SMs -> %u\n", part.sm.smCount,
              green_run.second, all.sm.smCount, full.second);
  d.green_destroy(green);
}

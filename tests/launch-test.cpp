// The launch API on a machine without a GPU: specs, and a clear error instead of a loader failure.

#include <gtest/gtest.h>

#include "launchfit/launch.hpp"

namespace lf = launchfit;

TEST(Spec, ChainsWorkShapeStreamAndSmem) {
  auto s = lf::max_occupancy().items(1000).per_thread(4).smem(4096);
  EXPECT_EQ(s.work_shape().kind, lf::work::shape::items);
  EXPECT_EQ(s.work_shape().n, 1000u);
  EXPECT_EQ(s.work_shape().per_thread, 4u);
  EXPECT_EQ(s.smem_bytes(), 4096u);
  EXPECT_EQ(s.smem_rule(), 4096u);
  auto g = lf::bytes_in_flight(32).grid_stride(1 << 20);
  EXPECT_EQ(g.work_shape().kind, lf::work::shape::grid_stride);
  EXPECT_EQ(g.get_policy().to_string(), "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
}

TEST(Spec, RerunnableAndResetSayHowTuningMayRepeatTheKernel) {
  const auto plain = lf::detail::make_request(lf::max_occupancy().items(10));
  EXPECT_FALSE(plain.rerunnable);
  EXPECT_FALSE(plain.back_to_back);
  const auto rerun = lf::detail::make_request(lf::max_occupancy().items(10).rerunnable());
  EXPECT_TRUE(rerun.rerunnable);
  EXPECT_TRUE(rerun.back_to_back);
  EXPECT_EQ(rerun.reset, nullptr);
  const auto reset = lf::detail::make_request(lf::max_occupancy().items(10).reset([] {}));
  EXPECT_TRUE(reset.rerunnable);     // tunable
  EXPECT_FALSE(reset.back_to_back);  // one launch per sample, after the reset
  EXPECT_NE(reset.reset, nullptr);
  const auto both = lf::detail::make_request(lf::max_occupancy().items(10).rerunnable().reset([] {}));
  EXPECT_TRUE(both.back_to_back);
  EXPECT_NE(both.reset, nullptr);
}

TEST(Spec, SmemRulesAreToldApartByTypeAndKey) {
  auto f = [](int b) { return static_cast<std::size_t>(b) * 4; };
  auto g = [](int b) { return static_cast<std::size_t>(b) * 8; };
  const auto a = lf::max_occupancy().smem_per_block(f).smem_rule();
  const auto b = lf::max_occupancy().smem_per_block(g).smem_rule();
  const auto c = lf::max_occupancy().smem_per_block(f, 1).smem_rule();
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, lf::max_occupancy().smem_per_block(f).smem_rule());
  EXPECT_EQ((*lf::max_occupancy().smem_per_block(f).smem_fn())(256), 1024u);
}

TEST(Spec, PolicyIdentityIsItsParameters) {
  EXPECT_EQ(lf::fixed(256).get_policy().hash(), lf::fixed(256).get_policy().hash());
  EXPECT_NE(lf::fixed(256).get_policy().hash(), lf::fixed(128).get_policy().hash());
  EXPECT_NE(lf::cooperative().get_policy().hash(), lf::max_occupancy().get_policy().hash());
}

TEST(LaunchWithoutGpu, GivesALaunchfitErrorNotALoaderFailure) {
  try {
    (void)lf::device_limits::query(0);
    GTEST_SKIP() << "a CUDA device is present";
  } catch (const lf::error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no CUDA driver") != std::string::npos || what.find("no CUDA device") != std::string::npos)
        << what;
  }
  lf::kernel k(reinterpret_cast<CUfunction>(0x1234));
  try {
    lf::launch(k, lf::max_occupancy().items(10), 1, 2.0f);
    FAIL() << "launched without a driver";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_NO_DEVICE") << e.what();
  }
}

TEST(LaunchWithoutGpu, EmptyKernelIsRefused) {
  lf::kernel empty;
  EXPECT_THROW(lf::launch(empty, lf::max_occupancy().items(10)), lf::error);
}

TEST(KernelHandles, EmptyHandlesAreRefusedBeforeAnyDriverCall) {
  try {
    (void)lf::kernel{}.function();
    FAIL() << "no error";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.message(), "empty launchfit::kernel");
  }
  try {
    (void)lf::module::from_memory(nullptr);
    FAIL() << "no error";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.message(), "null module image");
  }
}

TEST(KernelHandles, MissingModuleFileNamesThePath) {
  try {
    (void)lf::module::from_file("/nonexistent/kernels.cubin");
    FAIL() << "no error";
  } catch (const lf::error& e) {
    EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_FILE_NOT_FOUND");
    EXPECT_NE(e.message().find("cannot open '/nonexistent/kernels.cubin'"), std::string::npos) << e.what();
  }
}

// SPDX-License-Identifier: MIT
// Plans that travel between GPUs of one model, on a real device: a cache file written under another GPU's
// UUID (same name, compute capability, SM count, L2 and driver) serves this GPU, reported as match
// "cache-file-same-model", in frozen mode; with cache_match::exact it does not.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "gpu_test.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/device.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;
namespace fs = std::filesystem;

namespace {

__global__ void add_two(int* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 2;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(CacheModelGpu, APlanStoredUnderAnotherUuidOfThisModelIsFoundUnlessExactIsRequired) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  LF_CUDA_CHECK(cudaSetDevice(0));
  LF_CUDA_CHECK(cudaFree(nullptr));
  const fs::path dir =
      fs::temp_directory_path() / ("launchfit-cache-model-gpu-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path here = dir / "this-gpu.json", shipped = dir / "staging-gpu.json";
  lf::set_cache_match(lf::cache_match::model);

  // 1. Plan on this GPU and store it.
  lf::cache().clear();
  lf::set_cache_file(here.string());
  const lf::plan first = lf::plan_for(add_two, lf::max_occupancy().items(1 << 22));
  EXPECT_EQ(first.match, "computed");
  ASSERT_TRUE(lf::flush_cache_file());
  lf::close_cache_file();

  // 2. The same file as another GPU of this model would have written it: only the UUID differs.
  const lf::device_limits dev = lf::device_limits::query_current();
  auto contents = lf::detail::parse_cache_file(read_text(here));
  ASSERT_EQ(contents.status, lf::detail::cache_file_status::ok) << contents.problem;
  ASSERT_FALSE(contents.entries.empty());
  const std::string other_uuid =
      std::string(dev.uuid.rfind("MIG-", 0) == 0 ? "MIG-" : "GPU-") + "00000000-1111-2222-3333-444444444444";
  for (auto& e : contents.entries) {
    EXPECT_EQ(e.key.device_uuid, dev.uuid);
    EXPECT_EQ(e.key.device_name, dev.name) << "the planner stores the device model (stored_key_for)";
    EXPECT_EQ(e.key.sm_count, dev.sm_count);
    e.key.device_uuid = other_uuid;
  }
  std::ofstream(shipped, std::ios::binary) << lf::detail::serialize_cache_file(contents.entries);

  // 3. This GPU finds it, frozen, as the model's plan.
  lf::cache().clear();
  lf::set_cache_file(shipped.string(), lf::cache_file_mode::frozen);
  const lf::plan found = lf::plan_for(add_two, lf::max_occupancy().items(1 << 22));
  EXPECT_EQ(found.match, "cache-file-same-model") << found.to_string();
  EXPECT_EQ(found.block_threads, first.block_threads);
  EXPECT_EQ(found.blocks_per_sm, first.blocks_per_sm);

  // The plan launches and the kernel computes.
  const int n = 4096;
  int* d = nullptr;
  LF_CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
  LF_CUDA_CHECK(cudaMemset(d, 0, n * sizeof(int)));
  lf::launch(add_two, lf::max_occupancy().items(n), d, n);
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int> h(n);
  LF_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  LF_CUDA_CHECK(cudaFree(d));
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], 2) << i;

  // 4. Exact matches only: the other GPU's plan is not used.
  lf::set_cache_match(lf::cache_match::exact);
  lf::cache().clear();
  const lf::plan exact = lf::plan_for(add_two, lf::max_occupancy().items(1 << 22));
  EXPECT_EQ(exact.match, "computed");

  lf::set_cache_match(lf::cache_match::model);
  lf::close_cache_file();
  lf::cache().clear();
  fs::remove_all(dir);
}

// A calibrated target stored for this device's model (as launchfit-calibrate --cache does) is what
// bytes_in_flight uses by default, in this process and in one that only reads the file; an explicit
// set_bytes_in_flight_per_sm still wins.
TEST(CacheModelGpu, ACalibratedTargetIsBytesInFlightsDefaultOnThisModel) {
  LAUNCHFIT_REQUIRE_GPU_OR_SKIP();
  LF_CUDA_CHECK(cudaSetDevice(0));
  LF_CUDA_CHECK(cudaFree(nullptr));
  const fs::path dir = fs::temp_directory_path() / ("launchfit-calibration-gpu-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "plans.json";
  lf::set_cache_match(lf::cache_match::model);
  lf::cache().clear();
  lf::set_cache_file(file.string());
  const lf::plan table = lf::plan_for(add_two, lf::bytes_in_flight(16).items(1 << 22));
  EXPECT_NE(table.reason.find("32 KB target"), std::string::npos) << table.reason;  // the sm_90 table
  lf::store_bytes_in_flight_calibration(20 * 1024);
  ASSERT_TRUE(lf::flush_cache_file());
  lf::close_cache_file();
  lf::cache().clear();
  lf::set_cache_file(file.string(), lf::cache_file_mode::frozen);
  ASSERT_EQ(lf::bytes_in_flight_calibration(), std::optional<std::size_t>(20 * 1024));
  const lf::plan calibrated = lf::plan_for(add_two, lf::bytes_in_flight(16).items(1 << 22));
  EXPECT_NE(calibrated.reason.find("20 KB target"), std::string::npos) << calibrated.reason;
  EXPECT_LT(calibrated.blocks_per_sm * calibrated.block_threads, table.blocks_per_sm * table.block_threads);
  lf::close_cache_file();
  fs::remove_all(dir);
}

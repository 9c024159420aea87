// SPDX-License-Identifier: MIT
// The launch API on a machine without a GPU: specs, and a clear error instead of a loader failure.

#include "launchfit/launch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernel_internal.hpp"

namespace lf = launchfit;

// A setter on a temporary returns a spec by value: a reference to the temporary would dangle as soon as
// the full expression ends (`const auto& s = lf::fixed(256).items(n);`).
namespace {
using fixed_spec = lf::spec<lf::fixed_policy>;
template <class T>
constexpr bool is_value_v = std::is_same_v<T, fixed_spec>;
std::size_t no_smem(int) { return 0; }
static_assert(is_value_v<decltype(std::declval<fixed_spec>().items(1))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().per_thread(1))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().grid_stride(1))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().on(nullptr))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().smem(1))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().smem_per_block(&no_smem))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().cluster(lf::dims{}))>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().cooperative())>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().rerunnable())>);
static_assert(is_value_v<decltype(std::declval<fixed_spec>().reset(std::function<void()>()))>);
// On a named spec the setters still change it in place.
static_assert(std::is_same_v<decltype(std::declval<fixed_spec&>().items(1)), fixed_spec&>);
}  // namespace

TEST(Spec, AChainOnATemporaryBoundToAReferenceStaysAlive) {
  std::uint64_t n = 12345;
  auto* stream = reinterpret_cast<CUstream>(0x10);
  const auto& s = lf::fixed(256).items(n).on(stream).smem_per_block([](int b) { return std::size_t(b) * 2; });
  // Under AddressSanitizer (tests/sanitize.sh) a dangling spec is a stack-use-after-scope here.
  EXPECT_EQ(s.work_shape().n, n);
  EXPECT_EQ(s.work_shape().kind, lf::work::shape::items);
  EXPECT_EQ(s.stream(), stream);
  EXPECT_EQ((*s.smem_fn())(128), 256u);
  EXPECT_EQ(s.get_policy().to_string(), "fixed(block=256,grid=0)");
  const auto request = lf::detail::make_request(s);
  EXPECT_EQ(request.shape.n, n);

  auto named = lf::fixed(128);
  named.items(7).per_thread(2);  // lvalue setters change the named spec
  EXPECT_EQ(named.work_shape().n, 7u);
  EXPECT_EQ(named.work_shape().per_thread, 2u);
}

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

// Items per thread, waves and rows per thread take any integer type and are never wrapped: per_thread(-1)
// became 2^32 - 1 items a thread (one block for any n), per_thread(size_t{1} << 32 | 4) four.
TEST(Spec, CountsPerThreadAndWavesAreNeverWrapped) {
  const auto what = [](auto&& set) {
    try {
      set();
    } catch (const lf::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const int minus_one = -1;
  const std::size_t wide = (std::size_t{1} << 32) | 4;
  EXPECT_NE(what([&] { (void)lf::max_occupancy().items(1 << 20).per_thread(minus_one); }).find("per_thread k"),
            std::string::npos);
  EXPECT_NE(what([&] { (void)lf::max_occupancy().items(1 << 20).per_thread(wide); }).find("per_thread k"),
            std::string::npos);
  EXPECT_NE(what([&] { (void)lf::max_occupancy().grid_stride(1 << 20).waves(minus_one); }).find("waves k"),
            std::string::npos);
  EXPECT_NE(what([&] { (void)lf::max_occupancy().items(lf::extent{64, 64}).per_thread_y(minus_one); })
                .find("per_thread_y k"),
            std::string::npos);
  EXPECT_EQ(lf::max_occupancy().items(1 << 20).per_thread(std::size_t{4}).work_shape().per_thread, 4u);
  EXPECT_EQ(lf::max_occupancy().items(1 << 20).per_thread(4).work_shape().per_thread, 4u);
  EXPECT_EQ(lf::max_occupancy().grid_stride(1 << 20).waves(std::int64_t{3}).options().waves, 3u);
  // An enum constant and a class converting to an integer still take the std::uint32_t setters.
  enum { items_per_thread = 4 };
  EXPECT_EQ(lf::max_occupancy().items(1 << 20).per_thread(items_per_thread).work_shape().per_thread, 4u);
  EXPECT_EQ(lf::max_occupancy().grid_stride(1 << 20).waves(std::integral_constant<int, 2>{}).options().waves, 2u);
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

// module::get() records each kernel it hands out so unloading forgets their plans: from many threads at
// once, and each kernel once however often it is asked for.
TEST(KernelHandles, HandedOutIdsAreThreadSafeAndBounded) {
  lf::detail::kernel_id_set ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&ids, t] {
      for (int i = 0; i < 20000; ++i) ids.insert(static_cast<std::uintptr_t>(0x1000 + (i + t) % 16));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ids.size(), 16u);
  auto all = ids.ids();
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 16u);
  EXPECT_EQ(all.front(), 0x1000u);
  EXPECT_EQ(all.back(), 0x100fu);
  // Every thread inserting the same new ids at once: each is held once.
  threads.clear();
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&ids] {
      for (int i = 0; i < 3000; ++i) ids.insert(static_cast<std::uintptr_t>(0x100000 + i));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ids.size(), 16u + 3000u);
  all = ids.ids();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an id held twice";
}

TEST(KernelHandles, AModuleStaysMovable) {
  static_assert(std::is_nothrow_move_constructible_v<lf::module>);
  static_assert(std::is_nothrow_move_assignable_v<lf::module>);
  static_assert(!std::is_copy_constructible_v<lf::module>);
}

CUstream per_thread_file_stream(int which, CUstream given);  // tests/launch-per-thread-stream.cpp

// A launch with no stream (or 0) goes where <<<>>> goes in the same file: the legacy stream here, the
// per-thread stream in a file compiled with --default-stream per-thread, even with both in one program.
TEST(DefaultStream, IsTheTranslationUnitsAsForTripleChevrons) {
  const auto given = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  EXPECT_EQ(lf::detail::make_request(lf::fixed(256).items(1000)).stream, nullptr);
  EXPECT_EQ(lf::detail::make_request(lf::max_occupancy().items(1000).on(nullptr)).stream, nullptr);
  EXPECT_EQ(lf::detail::make_request(lf::fixed(256).items(1000).on(given)).stream, given);
  EXPECT_EQ(per_thread_file_stream(0, given), CU_STREAM_PER_THREAD);
  EXPECT_EQ(per_thread_file_stream(1, given), given) << "a stream given is kept";
  EXPECT_EQ(per_thread_file_stream(3, given), CU_STREAM_PER_THREAD) << "0 means the file's default stream";
  EXPECT_EQ(lf::detail::make_request(lf::fixed(256).items(1000)).stream, nullptr) << "after the other file's";
  // A launch's probe, and the request it makes where it does not hit, in each file: the same spec type's
  // request made by the other file's code would launch on the other file's default stream.
  EXPECT_EQ(per_thread_file_stream(2, given), CU_STREAM_PER_THREAD);
  const auto s = lf::fixed(256).items(1000);
  const lf::detail::launch_probe p = lf::detail::make_probe(s);
  EXPECT_EQ(p.stream, nullptr);
  EXPECT_EQ(p.make(p.spec, p.policy_hash, p.bucket).stream, nullptr);
}

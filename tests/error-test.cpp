// SPDX-License-Identifier: MIT
// launchfit::error: a typed code and the CUDA status, so callers branch on code(), never on a name string.

#include "launchfit/error.hpp"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "driver.hpp"
#include "error_of.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/policy.hpp"

namespace lf = launchfit;
using launchfit_test::error_of;

namespace {

const lf::errc all_codes[] = {
    lf::errc::other,
    lf::errc::cuda,
    lf::errc::no_driver,
    lf::errc::invalid_argument,
    lf::errc::not_found,
    lf::errc::invalid_policy,
    lf::errc::unknown_policy,
    lf::errc::duplicate_policy,
    lf::errc::bad_policy_string,
    lf::errc::bad_policy_parameter,
    lf::errc::invalid_plan,
    lf::errc::cooperative_too_large,
    lf::errc::cluster,
    lf::errc::unknown_arch,
    lf::errc::plugin,
    lf::errc::internal,
    lf::errc::missing_work,
    lf::errc::not_planned_yet,
    lf::errc::pdl_unsupported,
    lf::errc::invalid_query,
    lf::errc::invalid_config,
    lf::errc::plugin_refused,
};

lf::errc code_of(const char* name) { return lf::error("call", name, "message").code(); }

}  // namespace

TEST(ErrorCode, EveryNameLaunchfitThrowsHasItsCode) {
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_POLICY"), lf::errc::invalid_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_QUERY"), lf::errc::invalid_query);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_PLAN"), lf::errc::invalid_plan);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_CONFIG"), lf::errc::invalid_config);
  EXPECT_EQ(code_of("LAUNCHFIT_BAD_POLICY_STRING"), lf::errc::bad_policy_string);
  EXPECT_EQ(code_of("LAUNCHFIT_BAD_POLICY_PARAMETER"), lf::errc::bad_policy_parameter);
  EXPECT_EQ(code_of("LAUNCHFIT_UNKNOWN_POLICY"), lf::errc::unknown_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_DUPLICATE_POLICY"), lf::errc::duplicate_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_PLUGIN_ERROR"), lf::errc::plugin);
  EXPECT_EQ(code_of("LAUNCHFIT_PLUGIN_REFUSED"), lf::errc::plugin_refused);
  EXPECT_EQ(code_of("LAUNCHFIT_UNKNOWN_ARCH"), lf::errc::unknown_arch);
  EXPECT_EQ(code_of("CUDA_OCC_ERROR_UNKNOWN_DEVICE"), lf::errc::unknown_arch);
  EXPECT_EQ(code_of("CUDA_OCC_ERROR_INVALID_INPUT"), lf::errc::invalid_config);
  EXPECT_EQ(code_of("LAUNCHFIT_INTERNAL"), lf::errc::internal);
  EXPECT_EQ(code_of("CUDA_ERROR_INVALID_VALUE"), lf::errc::invalid_argument);
  EXPECT_EQ(code_of("CUDA_ERROR_INVALID_HANDLE"), lf::errc::invalid_argument);
  EXPECT_EQ(code_of("CUDA_ERROR_INVALID_DEVICE"), lf::errc::invalid_argument);
  EXPECT_EQ(code_of("CUDA_ERROR_NO_DEVICE"), lf::errc::no_driver);
  EXPECT_EQ(code_of("CUDA_ERROR_NOT_INITIALIZED"), lf::errc::no_driver);
  EXPECT_EQ(code_of("CUDA_ERROR_STUB_LIBRARY"), lf::errc::no_driver);
  EXPECT_EQ(code_of("CUDA_ERROR_FILE_NOT_FOUND"), lf::errc::not_found);
  EXPECT_EQ(code_of("CUDA_ERROR_NOT_FOUND"), lf::errc::not_found);
  EXPECT_EQ(code_of("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"), lf::errc::cooperative_too_large);
  EXPECT_EQ(code_of("CUDA_ERROR_INVALID_CLUSTER_SIZE"), lf::errc::cluster);
  EXPECT_EQ(code_of("CUDA_ERROR_INVALID_CONTEXT"), lf::errc::cuda);
  EXPECT_EQ(code_of("CUDA_ERROR_OUT_OF_MEMORY"), lf::errc::cuda);
  EXPECT_EQ(code_of("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), lf::errc::cuda);
  EXPECT_EQ(code_of("cudaErrorInvalidDeviceFunction"), lf::errc::cuda);  // a runtime-API name
  EXPECT_EQ(code_of("something else"), lf::errc::other);
  EXPECT_EQ(code_of(""), lf::errc::other);
}

// launchfit builds every error it throws from a code or a CUresult, never from a name string, so a typo
// in a name cannot make an error whose code() is errc::other (tests/lint/typed-errors.cmake checks the same
// without building).
TEST(ErrorCode, NoThrowSiteInTheSourcesNamesItsCodeAsAString) {
  namespace fs = std::filesystem;
  const std::regex by_name(
      R"(error\(\s*(?:[^;,]*,\s*)?"((?:LAUNCHFIT|CUDA_ERROR|CUDA_OCC_ERROR)_[A-Z_]*)\")");
  const std::regex typed(R"(error\(\s*(?:errc::[a-z_]+|CUDA_ERROR_[A-Z_]+)\s*,)");
  std::size_t typed_sites = 0;
  for (const char* dir : {"lib", "plugins", "include"}) {
    const fs::path root = fs::path(LAUNCHFIT_SOURCE_DIR) / dir;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".h") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator it(s.begin(), s.end(), by_name), end; it != end; ++it)
        ADD_FAILURE() << entry.path().string() << ": " << it->str()
                      << " (use launchfit::errc or the CUresult)";
      typed_sites += static_cast<std::size_t>(
          std::distance(std::sregex_iterator(s.begin(), s.end(), typed), std::sregex_iterator()));
    }
  }
  EXPECT_GE(typed_sites, 60u);  // the scan itself works
}

TEST(ErrorCode, NamedCudaErrorsCarryTheirCuresult) {
  const lf::error e("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory");
  EXPECT_EQ(e.cuda_result(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(lf::error("x", "CUDA_ERROR_INVALID_VALUE", "").cuda_result(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(lf::error("x", "LAUNCHFIT_INVALID_PLAN", "").cuda_result(), 0);
  EXPECT_EQ(lf::error("x", "cudaErrorInvalidValue", "").cuda_result(), 0);  // not a CUresult
}

TEST(ErrorCode, FromACuresult) {
  const lf::error e(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cuLaunchKernelEx", "too many blocks", "k",
                    "cfg");
  EXPECT_EQ(e.code(), lf::errc::cooperative_too_large);
  EXPECT_EQ(e.cuda_result(), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(e.cuda_error(), "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
  EXPECT_EQ(e.call(), "cuLaunchKernelEx");
  EXPECT_STREQ(
      e.what(),
      "cuLaunchKernelEx: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE (too many blocks) [kernel k] [plan cfg]");
  const lf::error oom(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "out of memory");
  EXPECT_EQ(oom.code(), lf::errc::cuda);
  EXPECT_EQ(oom.cuda_error(), "CUDA_ERROR_OUT_OF_MEMORY");
  // A status newer than this toolkit: named by number, still a CUDA error, and the name round-trips.
  const lf::error future(123456, "cuSomething", "new");
  EXPECT_EQ(future.cuda_error(), "CUresult 123456");
  EXPECT_EQ(future.code(), lf::errc::cuda);
  const lf::error again(future.call(), future.cuda_error(), future.message());
  EXPECT_EQ(again.cuda_result(), 123456);
  EXPECT_EQ(again.code(), lf::errc::cuda);
}

TEST(ErrorCode, FromACodeCarriesANameThatMapsBack) {
  std::set<std::string> names;
  for (lf::errc c : all_codes) {
    const lf::error e(c, "check", "message");
    EXPECT_EQ(e.code(), c) << lf::to_string(c);
    EXPECT_EQ(e.cuda_result(), 0) << lf::to_string(c);
    EXPECT_EQ(e.cuda_error().rfind("LAUNCHFIT_", 0), 0u) << e.cuda_error();
    EXPECT_EQ(code_of(e.cuda_error().c_str()), c) << e.cuda_error();
    EXPECT_TRUE(names.insert(lf::to_string(c)).second) << lf::to_string(c);
  }
  EXPECT_STREQ(lf::error(lf::errc::invalid_plan, "validate(block)", "too big", "k").what(),
               "validate(block): LAUNCHFIT_INVALID_PLAN (too big) [kernel k]");
}

TEST(ErrorCode, StickyErrorsLeaveTheContextUnusable) {
  for (CUresult r : {CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_MISALIGNED_ADDRESS,
                     CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_INVALID_PC, CUDA_ERROR_HARDWARE_STACK_ERROR,
                     CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_ASSERT, CUDA_ERROR_LAUNCH_TIMEOUT}) {
    const lf::error e(r, "cuStreamSynchronize", "fault");
    EXPECT_TRUE(e.is_sticky()) << e.cuda_error();
    EXPECT_EQ(e.code(), lf::errc::cuda) << e.cuda_error();
    // Rebuilt by name (adding a note to the message) it stays sticky.
    EXPECT_TRUE(lf::error(e.call(), e.cuda_error(), e.message() + "; note").is_sticky()) << e.cuda_error();
  }
  for (CUresult r : {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
                     CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, CUDA_ERROR_NOT_READY, CUDA_SUCCESS}) {
    EXPECT_FALSE(lf::error(r, "call", "").is_sticky()) << r;
  }
  EXPECT_FALSE(lf::error(lf::errc::cuda, "call", "").is_sticky());
}

TEST(ErrorCode, ByNameWhatIsUnchanged) {
  EXPECT_STREQ(lf::error("grid_for", "CUDA_ERROR_INVALID_VALUE", "grid too large").what(),
               "grid_for: CUDA_ERROR_INVALID_VALUE (grid too large)");
  EXPECT_STREQ(lf::error("", "", "").what(), "");
}

// Names come from the driver (cuGetErrorName) where one is loaded; without a driver, the statuses launchfit
// reports itself keep cuda.h's names and the rest are "CUresult <n>". Building an error never loads the
// driver. Run in a fresh process so that no earlier test has loaded it.
TEST(ErrorName, CudaNamesWithAndWithoutADriver) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int failures = 0;
        auto expect = [&failures](bool ok, const std::string& what) {
          if (!ok) {
            std::fprintf(stderr, "failed: %s\n", what.c_str());
            ++failures;
          }
        };
        const lf::error handle(CUDA_ERROR_INVALID_HANDLE, "launchfit::launch", "null kernel");
        expect(handle.cuda_error() == "CUDA_ERROR_INVALID_HANDLE", handle.cuda_error());
        expect(handle.code() == lf::errc::invalid_argument && handle.cuda_result() == 400, handle.what());
        const lf::error sticky(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize", "fault");
        expect(sticky.cuda_error() == "CUDA_ERROR_ILLEGAL_ADDRESS" && sticky.is_sticky(), sticky.what());
        const lf::error not_ready(CUDA_ERROR_NOT_READY, "cuEventQuery", "busy");
        expect(not_ready.cuda_error() == "CUresult 600", "without a driver: " + not_ready.cuda_error());
        expect(not_ready.code() == lf::errc::cuda && not_ready.cuda_result() == 600, not_ready.what());
        expect(launchfit::detail::loaded_driver_error_name(CUDA_ERROR_INVALID_VALUE) == nullptr,
               "building errors loaded the driver");
        // Now load it (or fail to, on a machine without one): a loaded driver names every status.
        (void)launchfit::detail::driver_available();
        const char* driver_name = launchfit::detail::loaded_driver_error_name(CUDA_ERROR_NOT_READY);
        const lf::error again(CUDA_ERROR_NOT_READY, "cuEventQuery", "busy");
        const std::string expected = driver_name ? driver_name : "CUresult 600";
        expect(again.cuda_error() == expected, again.cuda_error() + " vs " + expected);
        const lf::error by_name("cuEventQuery", again.cuda_error(), "busy");
        expect(by_name.cuda_result() == 600 && by_name.code() == lf::errc::cuda, by_name.what());
        expect(lf::error(CUDA_ERROR_INVALID_HANDLE, "x", "").cuda_error() == "CUDA_ERROR_INVALID_HANDLE",
               "with or without a driver, the same name");
        std::fflush(stderr);
        std::_Exit(failures == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// An error passed up through several layers names its kernel once, and keeps its code and status.
TEST(ErrorKernel, ARebuiltErrorNamesItsKernelOnce) {
  const lf::error plain(lf::errc::invalid_plan, "grid_for", "too big", {}, "block=32");
  const lf::error once = plain.with_kernel("saxpy", "block=64");
  const lf::error twice = once.with_kernel("saxpy", "block=64").with_kernel("other");
  for (const lf::error* e : {&once, &twice}) {
    EXPECT_STREQ(e->what(), "grid_for: LAUNCHFIT_INVALID_PLAN (too big) [kernel saxpy] [plan block=32]");
    EXPECT_EQ(e->kernel(), "saxpy");
    EXPECT_EQ(e->code(), lf::errc::invalid_plan);
    EXPECT_EQ(e->message(), "too big");
  }
  const lf::error fault =
      lf::error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernelEx", "fault").with_kernel("k").with_kernel("k");
  EXPECT_EQ(fault.cuda_result(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(fault.is_sticky());
  EXPECT_EQ(fault.code(), lf::errc::cuda);
  EXPECT_STREQ(fault.what(), "cuLaunchKernelEx: CUDA_ERROR_ILLEGAL_ADDRESS (fault) [kernel k]");
  // A code whose name is shared by no other keeps it (no name round trip).
  const lf::error refused =
      lf::error(lf::errc::plugin_refused, "load_plugin", "no such file").with_kernel("k");
  EXPECT_EQ(refused.code(), lf::errc::plugin_refused);
  EXPECT_EQ(refused.cuda_error(), "LAUNCHFIT_PLUGIN_REFUSED");
}

// The codes of errors the library throws, end to end.
TEST(ErrorCode, LibraryRefusalsCarryTheirCode) {
  EXPECT_EQ(error_of([] { (void)lf::policy_from_string("fixed("); }).code(), lf::errc::bad_policy_string);
  EXPECT_EQ(error_of([] { (void)lf::make_policy("no_such_policy"); }).code(), lf::errc::unknown_policy);
  EXPECT_EQ(error_of([] { (void)lf::use(std::shared_ptr<const lf::policy>()); }).code(),
            lf::errc::invalid_policy);
  lf::kernel empty;
  EXPECT_EQ(error_of([&] { lf::launch(empty, lf::fixed(256).items(1)); }).code(), lf::errc::invalid_argument);
}

// SPDX-License-Identifier: MIT
// launchfit::error: a typed code and the CUDA status, so callers branch on code(), never on a name string.

#include "launchfit/error.hpp"

#include <cuda.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

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
};

lf::errc code_of(const char* name) { return lf::error("call", name, "message").code(); }

}  // namespace

TEST(ErrorCode, EveryNameLaunchfitThrowsHasItsCode) {
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_POLICY"), lf::errc::invalid_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_QUERY"), lf::errc::invalid_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_PLAN"), lf::errc::invalid_plan);
  EXPECT_EQ(code_of("LAUNCHFIT_INVALID_CONFIG"), lf::errc::invalid_plan);
  EXPECT_EQ(code_of("LAUNCHFIT_BAD_POLICY_STRING"), lf::errc::bad_policy_string);
  EXPECT_EQ(code_of("LAUNCHFIT_BAD_POLICY_PARAMETER"), lf::errc::bad_policy_parameter);
  EXPECT_EQ(code_of("LAUNCHFIT_UNKNOWN_POLICY"), lf::errc::unknown_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_DUPLICATE_POLICY"), lf::errc::duplicate_policy);
  EXPECT_EQ(code_of("LAUNCHFIT_PLUGIN_ERROR"), lf::errc::plugin);
  EXPECT_EQ(code_of("LAUNCHFIT_PLUGIN_REFUSED"), lf::errc::plugin);
  EXPECT_EQ(code_of("LAUNCHFIT_UNKNOWN_ARCH"), lf::errc::unknown_arch);
  EXPECT_EQ(code_of("CUDA_OCC_ERROR_UNKNOWN_DEVICE"), lf::errc::unknown_arch);
  EXPECT_EQ(code_of("CUDA_OCC_ERROR_INVALID_INPUT"), lf::errc::invalid_plan);
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

// Guards the table against a new throw site: every literal name passed to error(call, "NAME", ...) in the
// library and plugins is known (a name in the table, never errc::other).
TEST(ErrorCode, NoThrowSiteInTheSourcesUsesAnUnknownName) {
  namespace fs = std::filesystem;
  const std::regex thrown(R"(error\(\s*[^,;()]*(?:\([^()]*\))?[^,;()]*,\s*"([A-Za-z_]+)\")");
  std::set<std::string> names;
  for (const char* dir : {"lib", "plugins", "include"}) {
    const fs::path root = fs::path(LAUNCHFIT_SOURCE_DIR) / dir;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".h") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator it(s.begin(), s.end(), thrown), end; it != end; ++it) names.insert((*it)[1]);
    }
  }
  EXPECT_GE(names.size(), 15u);  // the scan itself works
  for (const std::string& name : names) {
    if (name.rfind("LAUNCHFIT_", 0) != 0 && name.rfind("CUDA_", 0) != 0) continue;  // log format strings
    EXPECT_NE(code_of(name.c_str()), lf::errc::other) << name;
  }
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

// The codes of errors the library throws, end to end.
TEST(ErrorCode, LibraryRefusalsCarryTheirCode) {
  EXPECT_EQ(error_of([] { (void)lf::policy_from_string("fixed("); }).code(), lf::errc::bad_policy_string);
  EXPECT_EQ(error_of([] { (void)lf::make_policy("no_such_policy"); }).code(), lf::errc::unknown_policy);
  EXPECT_EQ(error_of([] { (void)lf::use(std::shared_ptr<const lf::policy>()); }).code(),
            lf::errc::invalid_policy);
  lf::kernel empty;
  EXPECT_EQ(error_of([&] { lf::launch(empty, lf::fixed(256).items(1)); }).code(), lf::errc::invalid_argument);
}

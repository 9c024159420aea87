// SPDX-License-Identifier: MIT
// launchfit::family on the CPU: what a family may hold, and its identity in plan keys. Launching members is
// tested on a GPU (tests/gpu/shapes-test.cu).
#include "launchfit/family.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "launchfit/error.hpp"

namespace lf = launchfit;

namespace {

// Stand-ins with a kernel's signature: a family only keeps their addresses.
template <int Block>
void reduce(const float*, float*, unsigned) {}

using reduce_family = lf::family<void(const float*, float*, unsigned)>;

std::string refusal(const std::function<void()>& make) {
  try {
    make();
  } catch (const lf::error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Family, MembersAndIdentity) {
  const reduce_family a{{64, reduce<64>}, {128, reduce<128>}, {256, reduce<256>}};
  const reduce_family b{{64, reduce<64>}, {128, reduce<128>}, {256, reduce<256>}};
  const reduce_family c{{64, reduce<64>}, {128, reduce<128>}};
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.members()[2].block, 256);
  EXPECT_EQ(a.id(), b.id());  // the same members share plans, whatever object holds them
  EXPECT_NE(a.id(), c.id());
  EXPECT_EQ(a.id() & 1u, 1u);  // never a function address
}

TEST(Family, RefusesWhatCannotBeLaunched) {
  EXPECT_NE(refusal([] { reduce_family f{}; }).find("1..16 members, got 0"), std::string::npos);
  EXPECT_NE(refusal([] { reduce_family f{{64, reduce<64>}, {64, reduce<128>}}; }).find("two members for block 64"),
            std::string::npos);
  EXPECT_NE(refusal([] { reduce_family f{{0, reduce<64>}}; }).find("block 0 outside 1..1024"), std::string::npos);
  EXPECT_NE(refusal([] { reduce_family f{{2048, reduce<64>}}; }).find("block 2048 outside 1..1024"),
            std::string::npos);
  EXPECT_NE(refusal([] { reduce_family f{{64, nullptr}}; }).find("null kernel"), std::string::npos);
  EXPECT_NE(refusal([] {
              reduce_family f{{1, reduce<1>},   {2, reduce<2>},   {3, reduce<3>},   {4, reduce<4>},   {5, reduce<5>},
                              {6, reduce<6>},   {7, reduce<7>},   {8, reduce<8>},   {9, reduce<9>},   {10, reduce<10>},
                              {11, reduce<11>}, {12, reduce<12>}, {13, reduce<13>}, {14, reduce<14>}, {15, reduce<15>},
                              {16, reduce<16>}, {17, reduce<17>}};
            }).find("1..16 members, got 17"),
            std::string::npos);
}

// A null member is refused with the code launch() gives a null kernel; the family's own rules (member count,
// block range, one member per block) are invalid arguments, never a policy's fault.
TEST(Family, RefusalsCarryTheCodeOfWhatIsWrong) {
  const auto error_from = [](const std::function<void()>& make) -> lf::error {
    try {
      make();
    } catch (const lf::error& e) {
      return e;
    }
    ADD_FAILURE() << "no launchfit::error thrown";
    return lf::error(lf::errc::other, "(none)", "(none)");
  };
  // launch() refuses a null kernel function pointer with CUDA_ERROR_INVALID_HANDLE (launch-test.cpp,
  // gpu/bad-input-test.cu): so does a family.
  const lf::error null_member = error_from([] { reduce_family f{{64, nullptr}}; });
  EXPECT_EQ(null_member.code(), lf::errc::invalid_argument) << null_member.what();
  EXPECT_EQ(null_member.cuda_error(), "CUDA_ERROR_INVALID_HANDLE") << null_member.what();
  EXPECT_EQ(null_member.cuda_result(), CUDA_ERROR_INVALID_HANDLE) << null_member.what();
  for (const auto& make :
       std::initializer_list<std::function<void()>>{[] { reduce_family f{}; },
                                                    [] {
                                                      reduce_family f{{0, reduce<64>}};
                                                    },
                                                    [] {
                                                      reduce_family f{{64, reduce<64>}, {64, reduce<128>}};
                                                    }}) {
    const lf::error e = error_from(make);
    EXPECT_EQ(e.code(), lf::errc::invalid_argument) << e.what();
    EXPECT_EQ(e.cuda_error(), "LAUNCHFIT_INVALID_ARGUMENT") << e.what();
  }
}

// SPDX-License-Identifier: MIT
// launchfit::family on the CPU: what a family may hold, and its identity in plan keys. Launching members is
// tested on a GPU (tests/gpu/shapes-test.cu).
#include "launchfit/family.hpp"

#include <gtest/gtest.h>

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

// Gradients all-reduced in bfloat16 (Communicator::start_all_reduce_bf16): on one process the values
// come back rounded to bfloat16, nearest with ties to even, checked against a rounding done in double
// from the two bfloat16 neighbours of each value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/dist/communicator.h"

using namespace kiln::dist;

namespace {

float with_low_bits_cleared(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// The bfloat16 nearest to a finite positive or negative f: the truncation or the next one up in magnitude.
float nearest_bf16(float f) {
  float lo = with_low_bits_cleared(f);
  uint32_t u;
  std::memcpy(&u, &lo, 4);
  uint32_t up_bits = u + 0x10000u;
  float hi;
  std::memcpy(&hi, &up_bits, 4);
  double dlo = std::fabs(static_cast<double>(f) - lo), dhi = std::fabs(static_cast<double>(hi) - f);
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return ((u >> 16) & 1u) ? hi : lo;  // a tie: the even one
}

}  // namespace

TEST(DistBf16, OneProcessRoundsToNearestEven) {
  std::vector<float> v = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-9f, -2.7182817f, 3.1415927f, 1e-20f, 6.5e4f, -0.1f};
  for (int i = 0; i < 200; ++i) v.push_back(std::sin(0.37f * i) * std::pow(10.0f, static_cast<float>(i % 9 - 4)));
  std::vector<float> got = v;
  auto comm = world();
  ASSERT_EQ(comm->size(), 1);
  comm->start_all_reduce_bf16(got.data(), static_cast<int64_t>(got.size()))->wait();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], nearest_bf16(v[i])) << "value " << v[i];
  // 7 bits of mantissa: the bfloat16 after 1 is 1 + 2^-7.
  EXPECT_EQ(got[1], 1.0f);              // 1 + 2^-8: a tie between the two; the even one is 1
  EXPECT_EQ(got[2], 1.0f);              // 1 + 2^-9: nearer 1
  EXPECT_EQ(got[3], 1.0f + 0x1p-7f);    // 1 + 3 * 2^-9: nearer 1 + 2^-7
}

TEST(DistBf16, NanStaysNan) {
  std::vector<float> v = {std::nanf(""), INFINITY, -INFINITY};
  world()->start_all_reduce_bf16(v.data(), 3)->wait();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], INFINITY);
  EXPECT_EQ(v[2], -INFINITY);
}

// demi::Half / demi::BFloat16 conversions, bit for bit against Eigen's, and the format facts that
// motivate mixed precision (underflow, overflow, subnormals, rounding).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "framework/core/half.h"

namespace demi {
namespace {

uint16_t eigen_half_bits(float f) { return Eigen::numext::bit_cast<uint16_t>(Eigen::half(f)); }
uint16_t eigen_bf16_bits(float f) { return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(f)); }
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Half, EveryHalfValueWidensLikeEigen) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float ours = Half::from_bits(static_cast<uint16_t>(b));
    const float eigen = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<uint16_t>(b)));
    if (std::isnan(eigen)) {
      EXPECT_TRUE(std::isnan(ours)) << "bits " << b;
    } else {
      EXPECT_EQ(bits(ours), bits(eigen)) << "bits " << b;
    }
  }
}

TEST(Half, NarrowingMatchesEigenOnRandomAndEdgeFloats) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.960464477539063e-8f,
                               2.980232238769531e-8f, 4.5e-8f, 6.103515625e-5f, 6.1e-5f, 1.0f + 1.0f / 512,
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) values.push_back(f);
  }
  for (float f : values) {
    EXPECT_EQ(Half(f).bits, eigen_half_bits(f)) << "value " << f;
    EXPECT_EQ(BFloat16(f).bits, eigen_bf16_bits(f)) << "value " << f;
  }
}

TEST(Half, EveryBFloat16ValueWidensExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float ours = BFloat16::from_bits(static_cast<uint16_t>(b));
    const float eigen = static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(static_cast<uint16_t>(b)));
    if (std::isnan(eigen)) {
      EXPECT_TRUE(std::isnan(ours));
    } else {
      EXPECT_EQ(bits(ours), bits(eigen)) << "bits " << b;
    }
  }
}

// The facts, each its own assertion.
TEST(FormatFacts, TinyGradientUnderflowsInFp16ButNotBf16) {
  EXPECT_EQ(static_cast<float>(Half(1e-8f)), 0.0f);
  EXPECT_NE(static_cast<float>(BFloat16(1e-8f)), 0.0f);
}
TEST(FormatFacts, LossScalingLiftsTinyGradientIntoFp16Range) {
  EXPECT_NEAR(static_cast<float>(Half(1e-8f * 65536.0f)), 6.5536e-4f, 1e-6f);
}
TEST(FormatFacts, Fp16MaxIs65504AndTwiceScaleOverflows) {
  EXPECT_EQ(static_cast<float>(Half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(2.0f * 65536.0f))));
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(65520.0f))));  // the tie above max rounds to inf
  EXPECT_EQ(static_cast<float>(Half(65519.0f)), 65504.0f);
}
TEST(FormatFacts, SmallestSubnormalAndNormal) {
  const float subnormal = std::ldexp(1.0f, -24);
  EXPECT_EQ(static_cast<float>(Half(subnormal)), subnormal);
  EXPECT_EQ(Half(subnormal).bits, 0x0001);
  EXPECT_EQ(static_cast<float>(Half(std::ldexp(1.0f, -25))), 0.0f);  // tie rounds to even (0)
  EXPECT_EQ(static_cast<float>(Half(1.5f * std::ldexp(1.0f, -25))), subnormal);
  EXPECT_EQ(static_cast<float>(Half(6.103515625e-5f)), 6.103515625e-5f);
  EXPECT_EQ(Half(6.103515625e-5f).bits, 0x0400);
}
TEST(FormatFacts, Bf16HasSevenMantissaBits) {
  const float x = 1.0f + std::ldexp(1.0f, -9);
  EXPECT_EQ(static_cast<float>(BFloat16(x)), 1.0f);
  EXPECT_EQ(static_cast<float>(Half(x)), x);
}
TEST(FormatFacts, TiesRoundToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10 in fp16: rounds to 1 (even mantissa).
  EXPECT_EQ(static_cast<float>(Half(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: rounds up to the even one.
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
}
TEST(FormatFacts, NanAndInfSurviveCasts) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(nan))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(nan))));
  EXPECT_EQ(static_cast<float>(Half(inf)), inf);
  EXPECT_EQ(static_cast<float>(Half(-inf)), -inf);
  EXPECT_EQ(static_cast<float>(BFloat16(inf)), inf);
  EXPECT_EQ(static_cast<float>(BFloat16(-inf)), -inf);
  // a NaN whose payload sits in the low bits must not become inf when they are dropped
  uint32_t u = 0x7f800001u;
  float payload_nan;
  std::memcpy(&payload_nan, &u, 4);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(payload_nan))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(payload_nan))));
}

}  // namespace
}  // namespace demi

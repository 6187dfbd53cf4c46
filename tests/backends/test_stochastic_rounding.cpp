// Tests for backends/stochastic_rounding.h and its use in the CPU optimizer kernels: the bit-level
// conversions agree with Eigen's (every half pattern, and many floats), stochastic rounding is
// exact on representable values, unbiased within statistical bounds, reproducible from its seed,
// and moves a weight by an update far below half an ulp where round-to-nearest cannot.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/kernels.h"
#include "backends/stochastic_rounding.h"

namespace {

using demi::DType;
using demi::backend::Rounding;
using demi::backend::SgdArgs;
using demi::backend::TensorRef;
using demi::backend::rounding::float_to_half_nearest;
using demi::backend::rounding::float_to_half_stochastic;
using demi::backend::rounding::half_to_float;
using demi::backend::rounding::HalfFormat;
using demi::backend::rounding::rounding_uniform;

uint16_t eigen_bits(float x, HalfFormat f) {
  if (f == HalfFormat::F16) return Eigen::numext::bit_cast<uint16_t>(Eigen::half(x));
  return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(x));
}
float eigen_value(uint16_t bits, HalfFormat f) {
  if (f == HalfFormat::F16) return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
}

const HalfFormat kFormats[] = {HalfFormat::F16, HalfFormat::BF16};
const char* name(HalfFormat f) { return f == HalfFormat::F16 ? "fp16" : "bf16"; }

TEST(StochasticRounding, BitConversionsAgreeWithEigen) {
  for (HalfFormat f : kFormats) {
    SCOPED_TRACE(name(f));
    for (uint32_t b = 0; b < 0x10000; ++b) {  // every half pattern decodes as Eigen decodes it
      const float ours = half_to_float(static_cast<uint16_t>(b), f), eigen = eigen_value(static_cast<uint16_t>(b), f);
      if (std::isnan(eigen)) {
        ASSERT_TRUE(std::isnan(ours)) << b;
        continue;
      }
      ASSERT_EQ(ours, eigen) << "bits " << b;
      ASSERT_EQ(float_to_half_nearest(ours, f), b) << "round trip of bits " << b;
    }
    std::mt19937 rng(1);
    std::uniform_int_distribution<uint32_t> any_bits;
    for (int k = 0; k < 2000000; ++k) {  // random floats of every exponent, ties to even included
      uint32_t bits = any_bits(rng);
      if (k % 4 == 0) bits &= 0xFFFFE000u;                  // exact fp16 mantissas ...
      if (k % 4 == 1) bits = (bits & 0xFFFFE000u) | 0x1000u;  // ... and exact fp16 ties
      if (k % 4 == 2) bits = (bits & 0xFFFF0000u) | 0x8000u;  // exact bf16 ties
      float x;
      std::memcpy(&x, &bits, 4);
      if (std::isnan(x)) continue;
      ASSERT_EQ(float_to_half_nearest(x, f), eigen_bits(x, f)) << x << " (bits " << bits << ")";
    }
  }
}

TEST(StochasticRounding, RepresentableValuesStayExact) {
  const float inf = std::numeric_limits<float>::infinity();
  for (HalfFormat f : kFormats) {
    for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0.099609375f, 1024.0f, inf, -inf}) {
      for (float u : {0.0f, 0.5f, 0.999999f}) EXPECT_EQ(float_to_half_stochastic(x, f, u), float_to_half_nearest(x, f)) << x;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half_stochastic(nan, f, 0.3f), f)));
  }
  // fp16 beyond 65504 rounds to nearest, as the format's largest value is the last one it can choose
  EXPECT_EQ(float_to_half_stochastic(65510.0f, HalfFormat::F16, 0.0f), 0x7BFF);
  EXPECT_EQ(float_to_half_stochastic(70000.0f, HalfFormat::F16, 0.0f), 0x7C00);
}

// The mean of many stochastic roundings of x is x: within 5 standard errors.
TEST(StochasticRounding, IsUnbiased) {
  struct Case {
    HalfFormat f;
    float x;
  };
  const Case cases[] = {{HalfFormat::BF16, 1.0f + 0.1f * 0.0078125f},  // 0.1 ulp above 1
                        {HalfFormat::BF16, -3.14159f},
                        {HalfFormat::BF16, 1e-20f},
                        {HalfFormat::F16, 1.0f + 0.03f * 0.0009765625f},  // 0.03 ulp above 1
                        {HalfFormat::F16, -0.3333333f},
                        {HalfFormat::F16, 3e-6f},    // a subnormal
                        {HalfFormat::F16, 1e-8f}};   // below the smallest subnormal (6e-8)
  constexpr int kDraws = 200000;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(name(c.f)) + " " + std::to_string(c.x));
    double sum = 0.0, sum_sq = 0.0;
    for (int i = 0; i < kDraws; ++i) {
      const double v = half_to_float(float_to_half_stochastic(c.x, c.f, rounding_uniform(42, 1000, i)), c.f);
      sum += v;
      sum_sq += v * v;
    }
    const double mean = sum / kDraws, var = std::max(sum_sq / kDraws - mean * mean, 0.0);
    const double nearest = half_to_float(float_to_half_nearest(c.x, c.f), c.f);
    EXPECT_NE(nearest, static_cast<double>(c.x)) << "the case must not be representable";
    EXPECT_NEAR(mean, c.x, 5.0 * std::sqrt(var / kDraws) + 1e-12 * std::fabs(c.x));
    EXPECT_GT(var, 0.0);  // both neighbours were chosen
  }
}

TEST(StochasticRounding, StreamIsASeededFunctionOfTheCounter) {
  EXPECT_EQ(rounding_uniform(7, 100, 5), rounding_uniform(7, 100, 5));
  EXPECT_EQ(rounding_uniform(7, 100, 5), rounding_uniform(7, 105, 0));  // offset + i is the counter
  EXPECT_NE(rounding_uniform(7, 100, 5), rounding_uniform(8, 100, 5));
  for (int i = 0; i < 1000; ++i) {
    const float u = rounding_uniform(3, 0, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

// The kernel: 100,000 bf16 weights at 1.0 stepped by an update of 0.1 ulp (7.8e-4). Round to nearest
// leaves every one at 1.0; stochastic rounding moves ~10% of them one ulp down, so the mean moves by
// the update; the same seed and offset give the same bits.
TEST(StochasticRounding, SgdStepMovesWeightsBySubUlpUpdatesOnAverage) {
  demi::backend::Kernels& cpu = demi::backend::kernels_for(demi::Device::cpu());
  constexpr int64_t n = 100000;
  const float ulp = 0.0078125f, update = 0.1f * ulp;
  auto step = [&](Rounding mode, uint64_t offset) {
    std::vector<Eigen::bfloat16> param(n, Eigen::bfloat16(1.0f));
    std::vector<float> grad(n, update);  // lr 1: p -= grad
    SgdArgs args;
    args.param = TensorRef{param.data(), {n}, DType::BF16};
    args.grad = TensorRef{grad.data(), {n}, DType::F32};
    args.lr = 1.0;
    args.rounding.mode = mode;
    args.rounding.seed = 11;
    args.rounding.offset = offset;
    cpu.sgd_step(args);
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(param[i]);
    return out;
  };
  for (float v : step(Rounding::Nearest, 0)) ASSERT_EQ(v, 1.0f);
  const std::vector<float> a = step(Rounding::Stochastic, 0);
  double mean = 0.0;
  int64_t moved = 0;
  for (float v : a) {
    mean += v;
    moved += v != 1.0f;
    ASSERT_TRUE(v == 1.0f || v == 1.0f - ulp / 2) << v;  // below 1 the bf16 spacing halves
  }
  mean /= n;
  // p = 0.1 ulp / (ulp / 2) = 0.2 of them move: mean 1 - update within 5 standard errors
  const double p = update / (ulp / 2);
  EXPECT_NEAR(static_cast<double>(moved) / n, p, 5 * std::sqrt(p * (1 - p) / n));
  EXPECT_NEAR(mean, 1.0 - update, 5 * (ulp / 2) * std::sqrt(p * (1 - p) / n));
  EXPECT_EQ(step(Rounding::Stochastic, 0), a);  // reproducible
  EXPECT_NE(step(Rounding::Stochastic, n), a);  // the next step's draws differ
}

}  // namespace

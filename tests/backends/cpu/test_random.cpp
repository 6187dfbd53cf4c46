// Tests for backends/cpu/random.cpp: Philox-4x32-10 known answers through the documented counter
// mapping, independence from the thread count, offsets, moments, and the half-open uniform range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "support/host_tensor.h"
#include "support/random_moments.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }


using demi::backend::RandomArgs;
using demi::backend::RandomKind;

double u24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1p-24; }
double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1p-53;
}

std::vector<double> draw(RandomKind kind, DType dtype, int64_t n, uint64_t seed, uint64_t offset, double a = 0.0,
                         double b = 1.0) {
  HostTensor t({n}, dtype);
  RandomArgs args;
  args.kind = kind;
  args.output = t.ref();
  args.a = a;
  args.b = b;
  args.seed = seed;
  args.offset = offset;
  cpu().random(args);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = t.get(i);
  return v;
}

TEST(CpuRandom, KnownAnswersThroughTheCounterMapping) {
  // Random123's Philox4x32-10 vector for counter 0, key 0: 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
  const std::vector<double> f64 = draw(RandomKind::Uniform, DType::F64, 1, 0, 0);
  EXPECT_EQ(f64[0], u53(0x6627e8d5u, 0xe169c58du));
  const std::vector<double> f32 = draw(RandomKind::Uniform, DType::F32, 1, 0, 0);
  EXPECT_EQ(f32[0], u24(0x6627e8d5u));
  const std::vector<double> normal = draw(RandomKind::Normal, DType::F64, 1, 0, 0);
  const double z = std::sqrt(-2.0 * std::log(1.0 - u53(0x6627e8d5u, 0xe169c58du))) *
                   std::cos(2.0 * M_PI * u53(0xbc57ac4cu, 0x9b00dbd8u));
  EXPECT_NEAR(normal[0], z, 1e-15);
  // Element 2 at offset 2^32 + 3 uses counter 2^32 + 5 = (5, 1, 0, 0); key from seed 0x0123456789abcdef:
  // Philox gives b8b243f7 da8fb9a8 46004299 e54c389c (an independent Python implementation).
  const uint64_t seed = 0x0123456789abcdefull, offset = (uint64_t{1} << 32) + 3;
  EXPECT_EQ(draw(RandomKind::Uniform, DType::F64, 3, seed, offset)[2], u53(0xb8b243f7u, 0xda8fb9a8u));
  EXPECT_EQ(draw(RandomKind::Uniform, DType::F32, 3, seed, offset)[2], u24(0xb8b243f7u));
  EXPECT_NEAR(draw(RandomKind::Normal, DType::F64, 3, seed, offset)[2], -0.23464582395568437, 1e-14);
}

TEST(CpuRandom, SameNumbersOnAnyThreadCount) {
  const int threads = demi::backend::cpu_threads();
  for (RandomKind kind : {RandomKind::Uniform, RandomKind::Normal}) {
    demi::backend::set_cpu_threads(1);
    const std::vector<double> one = draw(kind, DType::F32, 100000, 42, 7);
    demi::backend::set_cpu_threads(2);
    const std::vector<double> two = draw(kind, DType::F32, 100000, 42, 7);
    demi::backend::set_cpu_threads(3);
    const std::vector<double> three = draw(kind, DType::F32, 100000, 42, 7);
    EXPECT_EQ(one, two);
    EXPECT_EQ(one, three);
  }
  demi::backend::set_cpu_threads(threads);
}

TEST(CpuRandom, OffsetShiftsTheStreamAndSeedsDiffer) {
  for (RandomKind kind : {RandomKind::Uniform, RandomKind::Normal}) {
    const std::vector<double> base = draw(kind, DType::F64, 1000, 5, 0);
    const std::vector<double> shifted = draw(kind, DType::F64, 990, 5, 10);
    EXPECT_TRUE(std::equal(shifted.begin(), shifted.end(), base.begin() + 10))
        << "element i at offset 10 must be element i + 10 at offset 0";
    const std::vector<double> next = draw(kind, DType::F64, 1000, 5, 1000);
    const std::vector<double> other_seed = draw(kind, DType::F64, 1000, 6, 0);
    int same_offset = 0, same_seed = 0;
    for (size_t i = 0; i < base.size(); ++i) {
      same_offset += base[i] == next[i];
      same_seed += base[i] == other_seed[i];
    }
    EXPECT_EQ(same_offset, 0);
    EXPECT_EQ(same_seed, 0);
  }
}

TEST(CpuRandom, MomentsWithinThreeSigma) {
  const int64_t n = 100000;
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    demi::test::expect_normal_moments(draw(RandomKind::Normal, dtype, n, 123, 0, 1.5, 2.0), 1.5, 2.0);
    demi::test::expect_uniform_moments(draw(RandomKind::Uniform, dtype, n, 124, 0, -1.0, 3.0), -1.0, 3.0);
  }
}

TEST(CpuRandom, UniformStaysBelowBInHalfTypes) {
  // Rounding a + (b - a) * u to bf16 lands on b for ~1 draw in 500 unless the kernel steps down.
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    const std::vector<double> u = draw(RandomKind::Uniform, dtype, 100000, 9, 0, 0.0, 1.0);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
  }
  const std::vector<double> huge = draw(RandomKind::Uniform, DType::F16, 1000, 9, 0, 0.0, 1e6);
  EXPECT_EQ(*std::max_element(huge.begin(), huge.end()), 65504.0) << "inf steps down to the fp16 max";
  const std::vector<double> point = draw(RandomKind::Uniform, DType::F32, 10, 9, 0, 2.0, 2.0);
  EXPECT_EQ(point, std::vector<double>(10, 2.0));
}

TEST(CpuRandom, RejectsBadArguments) {
  EXPECT_THROW(draw(RandomKind::Uniform, DType::F32, 4, 0, 0, 1.0, 0.0), demi::Error);
  EXPECT_THROW(draw(RandomKind::Normal, DType::F32, 4, 0, 0, 0.0, -1.0), demi::Error);
  EXPECT_THROW(draw(RandomKind::Normal, DType::F32, 4, 0, 0, NAN, 1.0), demi::Error);
  EXPECT_THROW(draw(RandomKind::Uniform, DType::I64, 4, 0, 0), demi::Error);
}

}  // namespace

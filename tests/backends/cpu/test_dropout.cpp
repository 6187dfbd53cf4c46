// Tests for backends/cpu/dropout.cpp: the mask is the `random` kernel's float32 uniform under the
// same (seed, offset), compared element by element (so the CUDA kernel, which runs the same
// Philox, draws the same mask), kept elements scaled by 1 / (1 - p) in fp32 and rounded once, the
// keep rate, NaN and inf, thread counts, in place, and the argument errors. Once per ISA level:
// half inputs are widened and rounded by per-level conversions elsewhere, and the kernel must not
// depend on the level.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/error_of.h"
#include "support/host_tensor.h"

namespace {

using demi::backend::DropoutArgs;
using demi::backend::RandomArgs;
using demi::backend::RandomKind;
using demi::test::error_of;
using testing::HasSubstr;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

// The uniforms `random` draws for a float32 output of n elements under (seed, offset).
std::vector<double> uniforms(int64_t n, uint64_t seed, uint64_t offset) {
  HostTensor u({n}, DType::F32);
  RandomArgs args;
  args.kind = RandomKind::Uniform;
  args.output = u.ref();
  args.seed = seed;
  args.offset = offset;
  cpu().random(args);
  return u.values();
}

void run_dropout(HostTensor& x, HostTensor& y, double p, uint64_t seed, uint64_t offset) {
  DropoutArgs args;
  args.input = x.ref();
  args.output = y.ref();
  args.p = p;
  args.seed = seed;
  args.offset = offset;
  cpu().dropout(args);
}

// What element i must be: x * (1 / (1 - p)) in fp32 (fp64 for F64) rounded once to the dtype where
// u < 1 - p, else x * 0.
double expected(DType dtype, double x, double u, double p) {
  const bool kept = u < 1.0 - p;
  if (dtype == DType::F64) return x * (kept ? 1.0 / (1.0 - p) : 0.0);
  const float scale = 1.0f / static_cast<float>(1.0 - p);
  const float product = static_cast<float>(x) * (kept ? scale : 0.0f);
  HostTensor one({1}, dtype);
  one.set(0, product);  // one rounding from the fp32 product
  return one.get(0);
}

class CpuDropout : public demi_test::IsaFixture<std::tuple<demi_test::Level, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(IsaDtypes, CpuDropout,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

TEST_P(CpuDropout, MaskIsTheRandomKernelsFloat32Uniform) {
  std::mt19937 rng(3);
  struct Draw {
    int64_t n;
    uint64_t seed, offset;
  };
  // Sizes around the 64-lane Philox blocks, and an offset whose counters cross 2^32.
  for (const Draw& d : {Draw{1, 0, 0}, Draw{63, 7, 5}, Draw{1000, 42, 12345}, Draw{777, 0x0123456789abcdefull,
                                                                                     (uint64_t{1} << 32) - 300}}) {
    const std::vector<double> u = uniforms(d.n, d.seed, d.offset);
    for (double p : {0.1, 0.3, 0.5, 0.9}) {
      SCOPED_TRACE("n " + std::to_string(d.n) + ", p " + std::to_string(p) + ", " + demi::dtype_name(dtype()));
      HostTensor x({d.n}, dtype()), y({d.n}, dtype());
      const std::vector<double> vx = x.randomize(rng, -3.0, 3.0);
      run_dropout(x, y, p, d.seed, d.offset);
      for (int64_t i = 0; i < d.n; ++i) {
        const double want = expected(dtype(), vx[i], u[i], p);
        ASSERT_EQ(y.get(i), want) << "element " << i << ": x " << vx[i] << ", u " << u[i];
        ASSERT_EQ(std::signbit(y.get(i)), std::signbit(want)) << "element " << i;
      }
    }
  }
}

TEST_P(CpuDropout, KeepsAboutOneMinusPOfTheElements) {
  const int64_t n = 100000;
  const double p = 0.3;
  HostTensor x({n}, dtype()), y({n}, dtype());
  x.fill(1.0);
  run_dropout(x, y, p, 2024, 99);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += y.get(i) != 0.0;
  const double rate = static_cast<double>(kept) / static_cast<double>(n);
  const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
  EXPECT_NEAR(rate, 1.0 - p, 5 * sigma);
}

TEST_P(CpuDropout, EdgeProbabilitiesNanAndInf) {
  const std::vector<double> v = {1.5, -2.0, 0.0, -0.0, INFINITY, -INFINITY, std::nan(""), 1e-3};
  const int64_t n = static_cast<int64_t>(v.size());
  HostTensor x({n}, dtype()), y({n}, dtype());
  for (int64_t i = 0; i < n; ++i) x.set(i, v[i]);
  run_dropout(x, y, 0.0, 1, 0);  // keeps everything, scale 1
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(y.get(i)));
    } else {
      EXPECT_EQ(y.get(i), x.get(i)) << "element " << i;
    }
  }
  run_dropout(x, y, 1.0, 1, 0);  // drops everything: x * 0, so inf and NaN give NaN, as PyTorch's
  for (int64_t i = 0; i < n; ++i) {
    const double want = x.get(i) * 0.0;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y.get(i))) << "element " << i;
    } else {
      EXPECT_EQ(y.get(i), 0.0) << "element " << i;
      EXPECT_EQ(std::signbit(y.get(i)), std::signbit(want)) << "element " << i;
    }
  }
}

TEST_P(CpuDropout, SameMaskOnAnyThreadCountAndInPlace) {
  const int threads = demi::backend::cpu_threads();
  const int64_t n = 70001;
  HostTensor x({n}, dtype());
  std::mt19937 rng(5);
  x.fill_random(rng, -1.0, 1.0);
  std::vector<std::vector<double>> results;
  for (int t : {1, 2, 3}) {
    demi::backend::set_cpu_threads(t);
    HostTensor y({n}, dtype());
    run_dropout(x, y, 0.4, 8, 1u << 20);
    results.push_back(y.values());
  }
  demi::backend::set_cpu_threads(threads);
  HostTensor in_place = x;
  run_dropout(in_place, in_place, 0.4, 8, 1u << 20);
  results.push_back(in_place.values());
  for (size_t k = 1; k < results.size(); ++k) {
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(results[k][i], results[0][i]) << "run " << k << ", element " << i;
  }
}

TEST(CpuDropoutChecks, RefusesBadArguments) {
  HostTensor x({4}, DType::F32), y({4}, DType::F32), wrong({5}, DType::F32), labels({4}, DType::I64);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    EXPECT_THAT(error_of([&] { run_dropout(x, y, p, 0, 0); }), HasSubstr("dropout: p must be in [0, 1], got p = "));
  }
  EXPECT_THAT(error_of([&] { run_dropout(x, y, 1.5, 0, 0); }), HasSubstr("p = 1.5"));
  EXPECT_THAT(error_of([&] { run_dropout(x, wrong, 0.5, 0, 0); }), HasSubstr("must share dtype and number of elements"));
  EXPECT_THAT(error_of([&] { run_dropout(labels, labels, 0.5, 0, 0); }), HasSubstr("dropout: input must be floating"));
}

}  // namespace

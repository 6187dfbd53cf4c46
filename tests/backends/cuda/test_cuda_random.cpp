// Pins backends/cuda/random.cu: cuda:0 draws the CPU backend's numbers for the same (seed, offset),
// element by element: uniforms bit for bit in every floating dtype; normals within an ulp of fp32 /
// the half types and a few ulps of F64, since log and cos come from each platform's libm. Plus
// moments, the half-open range and the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "support/random_moments.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

// The stored bytes of n draws of `kind` on backend k.
std::vector<uint8_t> draw(Kernels& k, RandomKind kind, DType dtype, int64_t n, uint64_t seed, uint64_t offset,
                          double a, double b) {
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  RandomArgs args;
  args.kind = kind;
  args.a = a;
  args.b = b;
  args.seed = seed;
  args.offset = offset;
  if (k.device().kind() == Device::Kind::CPU) {
    std::vector<uint8_t> host(bytes);
    args.output = TensorRef{host.data(), {n}, dtype};
    k.random(args);
    return host;
  }
  Buffer out(k, bytes);
  args.output = out.ref({n}, dtype);
  k.random(args);
  return out.read();
}

// Distance in ulps between two stored floats of `width` bytes (bits mapped to a monotone integer line).
int64_t ulps_apart(const uint8_t* x, const uint8_t* y, size_t width) {
  auto ordered = [width](const uint8_t* p) {
    uint64_t bits = 0;
    std::memcpy(&bits, p, width);
    const uint64_t sign = uint64_t{1} << (8 * width - 1);
    const int64_t magnitude = static_cast<int64_t>(bits & (sign - 1));
    return (bits & sign) ? -magnitude : magnitude;
  };
  const int64_t d = ordered(x) - ordered(y);
  return d < 0 ? -d : d;
}

struct Draw {
  uint64_t seed, offset;
  int64_t n;
};

// Offsets not multiples of 4 (or of 64, the CPU's lane block), one that carries into the counter's
// high word mid-tensor, odd sizes, and one size that makes the grid-stride loop go round.
const std::vector<Draw> kDraws = {
    {0, 0, 1},
    {42, 7, 1031},
    {0x0123456789abcdefull, (uint64_t{1} << 32) - 5, 4099},
    {7, 3, (int64_t{1} << 20) + 3},
};

TEST(CudaRandom, UniformMatchesCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType dtype : kFloatDTypes) {
    for (const Draw& d : kDraws) {
      for (const auto& [a, b] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {-2.5, 3.75}, {1e-3, 1e-3 + 1e-6}}) {
        std::ostringstream name;
        name << "uniform [" << a << ", " << b << ") " << dtype << " n=" << d.n << " seed=" << d.seed
             << " offset=" << d.offset;
        SCOPED_TRACE(name.str());
        const std::vector<uint8_t> want = draw(cpu(), RandomKind::Uniform, dtype, d.n, d.seed, d.offset, a, b);
        const std::vector<uint8_t> got = draw(gpu(), RandomKind::Uniform, dtype, d.n, d.seed, d.offset, a, b);
        expect_same(got, want, dtype, name.str());
      }
    }
  }
}

TEST(CudaRandom, UniformStaysHalfOpenAsOnCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // Draws that round up to b step down one ulp, as on the CPU: bf16 rounds ~1 draw in 500 up to 1,
  // fp16 b = 1e6 up to inf; where b is a's next value every draw ends on a (fp32 and F64).
  struct Case { DType dtype; double a, b, want_max; };
  for (const Case& c : {Case{DType::BF16, 0.0, 1.0, 0.99609375}, Case{DType::F16, 0.0, 1.0, 0.99951171875},
                        Case{DType::F16, 0.0, 1e6, 65504.0}, Case{DType::F32, 0x1p26, 0x1p26 + 8, 0x1p26},
                        Case{DType::F64, 0x1p53, 0x1p53 + 2, 0x1p53}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " b=" + std::to_string(c.b));
    const std::vector<uint8_t> got = draw(gpu(), RandomKind::Uniform, c.dtype, 100000, 9, 0, c.a, c.b);
    expect_same(got, draw(cpu(), RandomKind::Uniform, c.dtype, 100000, 9, 0, c.a, c.b), c.dtype, "vs CPU");
    const std::vector<double> v = decode(got, c.dtype);
    EXPECT_EQ(*std::max_element(v.begin(), v.end()), c.want_max);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), c.a);
  }
  // a == b: every draw is a.
  EXPECT_EQ(decode(draw(gpu(), RandomKind::Uniform, DType::F32, 10, 9, 0, 2.0, 2.0), DType::F32),
            std::vector<double>(10, 2.0));
}

TEST(CudaRandom, NormalMatchesCpuWithinLibmUlps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType dtype : kFloatDTypes) {
    const size_t width = dtype_size(dtype);
    // z is computed in double on both sides; glibc's and libdevice's log / cos differ by an ulp or two
    // of double, which rounding to fp32 or a half type hides except at a rounding tie: <= 1 ulp there.
    const int64_t max_ulps = dtype == DType::F64 ? 16 : 1;
    for (const Draw& d : kDraws) {
      for (const auto& [a, b] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {1.5, 2.0}}) {
        std::ostringstream name;
        name << "normal (" << a << ", " << b << ") " << dtype << " n=" << d.n << " seed=" << d.seed
             << " offset=" << d.offset;
        SCOPED_TRACE(name.str());
        const std::vector<uint8_t> want = draw(cpu(), RandomKind::Normal, dtype, d.n, d.seed, d.offset, a, b);
        const std::vector<uint8_t> got = draw(gpu(), RandomKind::Normal, dtype, d.n, d.seed, d.offset, a, b);
        ASSERT_EQ(got.size(), want.size());
        const std::vector<double> g = decode(got, dtype), w = decode(want, dtype);
        int64_t differing = 0, reported = 0;
        for (int64_t i = 0; i < d.n; ++i) {
          const int64_t ulps = ulps_apart(got.data() + i * width, want.data() + i * width, width);
          if (ulps == 0) continue;
          ++differing;
          // Where a + b z cancels, the ulps of the small result are not the measure: b z's are.
          const double cancel_tol = 16 * 0x1p-52 * (std::fabs(a) + std::fabs(w[i] - a));
          if (ulps <= max_ulps || std::fabs(g[i] - w[i]) <= cancel_tol || reported >= 5) continue;
          ADD_FAILURE() << name.str() << ": element " << i << " is " << g[i] << ", want " << w[i] << " ("
                        << ulps << " ulps apart)";
          ++reported;
        }
        if (dtype != DType::F64) {
          EXPECT_LE(differing, d.n / 1000) << "fp32 and half normals should almost always be the CPU's bits";
        }
      }
    }
  }
}

TEST(CudaRandom, MomentsWithinThreeSigma) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const int64_t n = 1 << 20;
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<double> z = decode(draw(gpu(), RandomKind::Normal, dtype, n, 123, 1, 1.5, 2.0), dtype);
    test::expect_normal_moments(z, 1.5, 2.0);
    const std::vector<double> u = decode(draw(gpu(), RandomKind::Uniform, dtype, n, 124, 1, -1.0, 3.0), dtype);
    test::expect_uniform_moments(u, -1.0, 3.0);
  }
}

TEST(CudaRandom, OffsetShiftsTheStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const RandomKind kind : {RandomKind::Uniform, RandomKind::Normal}) {
    const std::vector<double> base = decode(draw(gpu(), kind, DType::F64, 1000, 5, 0, 0.0, 1.0), DType::F64);
    const std::vector<double> shifted = decode(draw(gpu(), kind, DType::F64, 990, 5, 10, 0.0, 1.0), DType::F64);
    EXPECT_TRUE(std::equal(shifted.begin(), shifted.end(), base.begin() + 10))
        << "element i at offset 10 must be element i + 10 at offset 0";
  }
}

TEST(CudaRandom, RejectsBadArgumentsAndSkipsEmpty) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  EXPECT_THROW(draw(gpu(), RandomKind::Uniform, DType::F32, 4, 0, 0, 1.0, 0.0), Error);
  EXPECT_THROW(draw(gpu(), RandomKind::Normal, DType::F32, 4, 0, 0, 0.0, -1.0), Error);
  EXPECT_THROW(draw(gpu(), RandomKind::Normal, DType::F32, 4, 0, 0, NAN, 1.0), Error);
  EXPECT_THROW(draw(gpu(), RandomKind::Uniform, DType::F32, 4, 0, 0, 0.0, INFINITY), Error);
  EXPECT_THROW(draw(gpu(), RandomKind::Uniform, DType::I64, 4, 0, 0, 0.0, 1.0), Error);
  EXPECT_TRUE(draw(gpu(), RandomKind::Normal, DType::F16, 0, 0, 0, 0.0, 1.0).empty());
}

}  // namespace
}  // namespace demi::backend

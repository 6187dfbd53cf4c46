// Tests for backends/cpu/elementwise.cpp: fill, cast (format facts of fp16 / bf16 rounding),
// unary ops and broadcasting binary ops against naive double references, in every floating dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/broadcast_index.h"
#include "support/host_tensor.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }


using demi::backend::BinaryKind;
using demi::backend::UnaryKind;

using demi::test::broadcast_index;

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

double binary_ref(BinaryKind kind, double a, double b) {
  switch (kind) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
    case BinaryKind::ReluBackward: return b <= 0 ? 0.0 : a;
    case BinaryKind::GeluBackward: return a * gelu_grad_ref(b);
    case BinaryKind::Eq: return a == b;
    case BinaryKind::Ne: return a != b;
    case BinaryKind::Lt: return a < b;
    case BinaryKind::Le: return a <= b;
    case BinaryKind::Gt: return a > b;
    case BinaryKind::Ge: return a >= b;
  }
  return 0.0;
}

struct BinaryCase {
  const char* name;
  Shape a, b, y;
};

const BinaryCase kBinaryCases[] = {
    {"same shape", {2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
    {"0-d", {}, {}, {}},
    {"scalar b", {4, 5}, {}, {4, 5}},
    {"scalar a", {}, {4, 5}, {4, 5}},
    {"channel [N,C,H,W] x [1,C,1,1]", {2, 3, 4, 5}, {1, 3, 1, 1}, {2, 3, 4, 5}},
    {"channel [1,C,1,1] x [N,C,H,W]", {1, 3, 1, 1}, {2, 3, 4, 5}, {2, 3, 4, 5}},
    {"row [N,K] x [K]", {6, 7}, {7}, {6, 7}},
    {"outer [3,1,5] x [1,4,1]", {3, 1, 5}, {1, 4, 1}, {3, 4, 5}},
    {"column x row [5,1] x [1,6]", {5, 1}, {1, 6}, {5, 6}},
    {"trailing [4,3,1] x [4,3,6]", {4, 3, 1}, {4, 3, 6}, {4, 3, 6}},
    {"y larger than both: [1,C,1,1] x 0-d -> [N,C,H,W]", {1, 3, 1, 1}, {}, {2, 3, 4, 5}},
    {"size-1 operands expanded to [2,3]", {1}, {1}, {2, 3}},
    {"batch 1", {1, 8}, {1, 8}, {1, 8}},
    {"large same shape (parallel)", {40001}, {40001}, {40001}},
    {"large row broadcast, chunks start mid-row", {1201, 37}, {37}, {1201, 37}},
    {"large channel broadcast", {2, 16, 33, 33}, {1, 16, 1, 1}, {2, 16, 33, 33}},
    {"empty", {0, 3}, {3}, {0, 3}},
};

const BinaryKind kBinaryKinds[] = {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div,
                                   BinaryKind::ReluBackward, BinaryKind::GeluBackward, BinaryKind::Eq,
                                   BinaryKind::Ne, BinaryKind::Lt, BinaryKind::Le, BinaryKind::Gt,
                                   BinaryKind::Ge};

// The tests below run once per ISA level: half <-> fp32 conversions are per-level kernels.
class CpuBinary : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, CpuBinary, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);
class CpuUnary : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, CpuUnary, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);
class CpuCast : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, CpuCast, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

TEST_P(CpuBinary, MatchesNaiveBroadcastReference) {
  std::mt19937 rng(1);
  for (const BinaryCase& c : kBinaryCases) {
    for (BinaryKind kind : kBinaryKinds) {
      for (DType dtype : kFloating) {
        SCOPED_TRACE(std::string(c.name) + ", kind " + std::to_string(static_cast<int>(kind)) + ", " +
                     demi::dtype_name(dtype));
        HostTensor a(c.a, dtype), b(c.b, dtype), y(c.y, dtype);
        const std::vector<double> va = a.randomize(rng, -2.0, 2.0);
        std::vector<double> vb = b.randomize(rng, 0.5, 2.0);  // away from 0 for div
        for (int64_t i = 0; i < b.numel(); i += 2) {
          b.set(i, -vb[i]);
          vb[i] = -vb[i];
        }
        TensorRef ra = a.ref(), rb = b.ref(), ry = y.ref();
        cpu().binary(kind, ra, rb, ry);
        std::vector<double> ref(static_cast<size_t>(y.numel()));
        for (int64_t i = 0; i < y.numel(); ++i)
          ref[i] = binary_ref(kind, va[broadcast_index(i, c.y, c.a)], vb[broadcast_index(i, c.y, c.b)]);
        expect_close(y, ref, rounded(dtype));
      }
    }
  }
}

// Random operands are almost never equal: the comparisons also on ties, signed zeros, infinities
// and NaN (unequal to everything, itself included).
TEST_P(CpuBinary, ComparisonsOnTiesInfinitiesAndNaN) {
  const double nan = std::nan(""), inf = INFINITY;
  const std::vector<double> a = {1.0, 1.0, 2.0, -0.0, inf, -inf, nan, nan, 0.5};
  const std::vector<double> b = {1.0, 2.0, 1.0, 0.0, inf, inf, 1.0, nan, 0.5};
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    const int64_t n = static_cast<int64_t>(a.size());
    HostTensor ta({n}, dtype), tb({n}, dtype), y({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
      ta.set(i, a[i]);
      tb.set(i, b[i]);
    }
    for (BinaryKind kind : {BinaryKind::Eq, BinaryKind::Ne, BinaryKind::Lt, BinaryKind::Le, BinaryKind::Gt,
                            BinaryKind::Ge}) {
      cpu().binary(kind, ta.ref(), tb.ref(), y.ref());
      std::vector<double> ref(a.size());
      for (size_t i = 0; i < a.size(); ++i) ref[i] = binary_ref(kind, a[i], b[i]);
      expect_close(y, ref, kExact);
    }
  }
}

TEST_P(CpuBinary, InPlaceIntoA) {
  std::mt19937 rng(2);
  const BinaryCase cases[] = {{"in-place channel", {2, 3, 4, 5}, {1, 3, 1, 1}, {2, 3, 4, 5}},
                              {"in-place same shape, large", {50000}, {50000}, {50000}},
                              {"in-place scalar", {7, 9}, {}, {7, 9}}};
  for (const BinaryCase& c : cases) {
    for (DType dtype : kFloating) {
      SCOPED_TRACE(std::string(c.name) + ", " + demi::dtype_name(dtype));
      HostTensor a(c.a, dtype), b(c.b, dtype);
      const std::vector<double> va = a.randomize(rng, -2.0, 2.0), vb = b.randomize(rng, -2.0, 2.0);
      TensorRef ra = a.ref(), rb = b.ref();
      cpu().binary(BinaryKind::Add, ra, rb, ra);
      std::vector<double> ref(va.size());
      for (int64_t i = 0; i < a.numel(); ++i) ref[i] = va[i] + vb[broadcast_index(i, c.y, c.b)];
      expect_close(a, ref, rounded(dtype));
    }
  }
}

TEST_P(CpuBinary, RejectsBadShapesAndDtypes) {
  HostTensor a({2, 3}, DType::F32), b({3}, DType::F32), y({4, 3}, DType::F32);
  TensorRef ra = a.ref(), rb = b.ref(), ry = y.ref();
  try {
    cpu().binary(BinaryKind::Add, ra, rb, ry);
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 3]"), std::string::npos) << what;
  }
  HostTensor big({2, 3, 3}, DType::F32), wide({2, 3}, DType::F32);
  TensorRef rbig = big.ref(), rw = wide.ref();
  EXPECT_THROW(cpu().binary(BinaryKind::Add, rbig, rb, rw), demi::Error);  // a has more dims than y
  HostTensor row({1, 3}, DType::F32);
  TensorRef rrow = row.ref();
  EXPECT_THROW(cpu().binary(BinaryKind::Add, rrow, rw, rrow), demi::Error);  // y aliases a broadcast a
  HostTensor d({2, 3}, DType::F64);
  TensorRef rd = d.ref();
  EXPECT_THROW(cpu().binary(BinaryKind::Mul, rw, rd, rw), demi::Error);
  HostTensor i({2, 3}, DType::I64);
  TensorRef ri = i.ref();
  EXPECT_THROW(cpu().binary(BinaryKind::Mul, ri, ri, ri), demi::Error);
}

struct UnaryCase {
  const char* name;
  UnaryKind kind;
  double alpha, beta, lo, hi;
};

const UnaryCase kUnaryCases[] = {
    {"neg", UnaryKind::Neg, 0, 0, -3, 3},          {"exp", UnaryKind::Exp, 0, 0, -5, 5},
    {"log", UnaryKind::Log, 0, 0, 0.01, 10},       {"sqrt", UnaryKind::Sqrt, 0, 0, 0, 10},
    {"relu", UnaryKind::Relu, 0, 0, -2, 2},        {"gelu", UnaryKind::Gelu, 0, 0, -5, 5},
    {"pow 2", UnaryKind::Pow, 2.0, 0, -3, 3},      {"pow 3", UnaryKind::Pow, 3.0, 0, -2, 2},
    {"pow 0.5", UnaryKind::Pow, 0.5, 0, 0.01, 4},  {"pow -1.5", UnaryKind::Pow, -1.5, 0, 0.2, 4},
    {"pow -0.5", UnaryKind::Pow, -0.5, 0, 0.01, 4}, {"pow -1", UnaryKind::Pow, -1.0, 0, 0.2, 4},
    {"pow -2", UnaryKind::Pow, -2.0, 0, 0.2, 4},
    {"affine", UnaryKind::Affine, -1.5, 0.25, -3, 3},
    {"scale", UnaryKind::Affine, -1.5, -0.0, -3, 3},
    {"div_scalar", UnaryKind::DivScalar, 3.0, 0, -3, 3},
    {"clamp", UnaryKind::Clamp, -0.5, 1.25, -3, 3},
    {"clamp min only", UnaryKind::Clamp, 0.5, INFINITY, -3, 3},
    {"clamp min > max gives max", UnaryKind::Clamp, 1.0, -1.0, -3, 3},
    {"abs", UnaryKind::Abs, 0, 0, -3, 3},
    {"sign", UnaryKind::Sign, 0, 0, -3, 3},
};

double unary_ref(const UnaryCase& c, double x) {
  switch (c.kind) {
    case UnaryKind::Neg: return -x;
    case UnaryKind::Exp: return std::exp(x);
    case UnaryKind::Log: return std::log(x);
    case UnaryKind::Sqrt: return std::sqrt(x);
    case UnaryKind::Relu: return x > 0 ? x : 0.0;
    case UnaryKind::Gelu: return gelu_ref(x);
    case UnaryKind::Pow: return std::pow(x, c.alpha);
    case UnaryKind::Affine: return c.alpha * x + c.beta;
    case UnaryKind::DivScalar: return x / c.alpha;
    case UnaryKind::Clamp: return std::min(std::max(x, c.alpha), c.beta);
    case UnaryKind::Abs: return std::fabs(x);
    case UnaryKind::Sign: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  }
  return 0.0;
}

TEST_P(CpuUnary, MatchesNaiveReference) {
  std::mt19937 rng(3);
  const Shape shapes[] = {{}, {1}, {7}, {3, 5}, {40, 1000}};
  for (const UnaryCase& c : kUnaryCases) {
    for (const Shape& shape : shapes) {
      for (DType dtype : kFloating) {
        SCOPED_TRACE(std::string(c.name) + ", numel " + std::to_string(demi::shape_numel(shape)) + ", " +
                     demi::dtype_name(dtype));
        HostTensor x(shape, dtype), y(shape, dtype);
        const std::vector<double> vx = x.randomize(rng, c.lo, c.hi);
        cpu().unary(c.kind, x.ref(), y.ref(), c.alpha, c.beta);
        std::vector<double> ref(vx.size());
        for (size_t i = 0; i < vx.size(); ++i) ref[i] = unary_ref(c, vx[i]);
        expect_close(y, ref, rounded(dtype));
        // In place gives the same values.
        TensorRef rx = x.ref();
        cpu().unary(c.kind, rx, rx, c.alpha, c.beta);
        expect_close(x, ref, rounded(dtype));
      }
    }
  }
}

// Where PyTorch's values differ from the textbook ones, found by crosscheck/ (scripts/crosscheck-pytorch):
// x * 2 keeps -0 (alpha x + beta with beta = -0; + 0 made it +0), x / 3 is a correctly rounded division (x * (1/3) is an
// ulp off for a third of the values), and pow's exponents 0.5, -0.5, -1, -2 and 3 are sqrt, 1/sqrt,
// 1/x, 1/(x x) and x x x: pow(-inf, 0.5) is NaN and pow(-0, -0.5) is -inf. 67 values each, so that
// the vector bodies and tails both run.
TEST_P(CpuUnary, ScalingDivisionAndPowAsPyTorch) {
  const double inf = INFINITY;
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({67}, dtype), y({67}, dtype);
    for (int64_t i = 0; i < 67; ++i) x.set(i, -0.0);
    cpu().unary(UnaryKind::Affine, x.ref(), y.ref(), 2.0, -0.0);  // x * 2: adding -0 changes nothing
    for (int64_t i = 0; i < 67; ++i) ASSERT_TRUE(y.get(i) == 0.0 && std::signbit(y.get(i))) << "x * 2 at -0, " << i;
    cpu().unary(UnaryKind::DivScalar, x.ref(), y.ref(), 3.0, 0.0);
    for (int64_t i = 0; i < 67; ++i) ASSERT_TRUE(y.get(i) == 0.0 && std::signbit(y.get(i))) << "x / 3 at -0, " << i;
    const double special[] = {-inf, -0.0, 0.0, inf, 4.0};
    const double want_sqrt[] = {std::nan(""), -0.0, 0.0, inf, 2.0}, want_rsqrt[] = {std::nan(""), -inf, inf, 0.0, 0.5};
    for (int64_t i = 0; i < 67; ++i) x.set(i, special[i % 5]);
    for (const auto& [p, want] : {std::make_pair(0.5, want_sqrt), std::make_pair(-0.5, want_rsqrt)}) {
      cpu().unary(UnaryKind::Pow, x.ref(), y.ref(), p, 0.0);
      for (int64_t i = 0; i < 67; ++i) {
        const double got = y.get(i), w = want[i % 5];
        EXPECT_TRUE(std::isnan(w) ? std::isnan(got) : got == w && std::signbit(got) == std::signbit(w))
            << "pow(" << special[i % 5] << ", " << p << ") = " << got << ", PyTorch " << w;
      }
    }
  }
  HostTensor x({1000}, DType::F32), y({1000}, DType::F32);
  std::mt19937 rng(5);
  const std::vector<double> v = x.randomize(rng, -10.0, 10.0);
  cpu().unary(UnaryKind::DivScalar, x.ref(), y.ref(), 3.0, 0.0);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<float>(y.get(i)), static_cast<float>(v[i]) / 3.0f) << i;
}

TEST_P(CpuUnary, SpecialValues) {
  const double nan = std::nan(""), inf = INFINITY;
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({5}, dtype), y({5}, dtype);
    const double values[] = {nan, inf, -inf, 0.0, -1.0};
    for (int i = 0; i < 5; ++i) x.set(i, values[i]);
    cpu().unary(UnaryKind::Relu, x.ref(), y.ref());
    expect_close(y, {nan, inf, 0.0, 0.0, 0.0}, rounded(dtype));
    cpu().unary(UnaryKind::Exp, x.ref(), y.ref());
    expect_close(y, {nan, inf, 0.0, 1.0, std::exp(-1.0)}, rounded(dtype));
    cpu().unary(UnaryKind::Log, x.ref(), y.ref());
    expect_close(y, {nan, inf, nan, -inf, nan}, rounded(dtype));
    cpu().unary(UnaryKind::Clamp, x.ref(), y.ref(), -0.5, 2.0);
    expect_close(y, {nan, 2.0, -0.5, 0.0, -0.5}, rounded(dtype));
    cpu().unary(UnaryKind::Abs, x.ref(), y.ref());
    expect_close(y, {nan, inf, inf, 0.0, 1.0}, rounded(dtype));
    cpu().unary(UnaryKind::Sign, x.ref(), y.ref());  // PyTorch's sign: 0 at NaN
    expect_close(y, {0.0, 1.0, -1.0, 0.0, -1.0}, rounded(dtype));
    x.set(3, -0.0);
    cpu().unary(UnaryKind::Abs, x.ref(), y.ref());
    EXPECT_FALSE(std::signbit(y.get(3))) << "|-0| is +0";
  }
  HostTensor a({3}, DType::F32), b({4}, DType::F32), c({3}, DType::F16);
  EXPECT_THROW(cpu().unary(UnaryKind::Neg, a.ref(), b.ref()), demi::Error);
  EXPECT_THROW(cpu().unary(UnaryKind::Neg, a.ref(), c.ref()), demi::Error);
}

// exp below the smallest normal result: subnormals, then 0 (PyTorch's values), on vectors long
// enough for the vectorised path. Eigen's exp alone gave 2.9e-39 for every x below -88.7.
TEST_P(CpuUnary, ExpUnderflowsThroughTheSubnormalsToZero) {
  const double xs[] = {-80, -87, -87.5, -88, -88.5, -89, -95, -100, -103, -104, -120, -200, -INFINITY};
  constexpr int kCount = sizeof(xs) / sizeof(xs[0]);
  for (const DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({4 * kCount}, dtype), y({4 * kCount}, dtype);
    std::vector<double> want;
    for (int i = 0; i < 4 * kCount; ++i) {
      x.set(i, xs[i % kCount]);
      want.push_back(std::exp(x.get(i)));
    }
    cpu().unary(UnaryKind::Exp, x.ref(), y.ref());
    // A few ulps of the result, and one step of the dtype's subnormals (F32 2^-149, BF16 2^-133).
    const Tolerance tol = dtype == DType::F32    ? Tolerance{4e-7, 0x1p-149}
                          : dtype == DType::BF16 ? Tolerance{0x1p-8, 0x1p-133}
                                                 : Tolerance{1e-15, 0.0};
    expect_close(y, want, tol);
  }
}

// log and sqrt of subnormal inputs, on vectors long enough for the vectorised path: Eigen's
// versions gave log(FLT_MIN) = -87.3 for every subnormal x and flushed sqrt's to 0.
TEST_P(CpuUnary, LogAndSqrtOfSubnormals) {
  const double xs[] = {1e-40, 3e-39, 1e-44, 1.4e-45, 1e-38, 1.17e-38, 2e-38, 5.0, 1e-310, 4e-320};
  constexpr int kCount = sizeof(xs) / sizeof(xs[0]);
  for (const DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({4 * kCount}, dtype), y({4 * kCount}, dtype);
    std::vector<double> want_log, want_sqrt;
    for (int i = 0; i < 4 * kCount; ++i) {
      x.set(i, xs[i % kCount]);  // stored rounded: 0 where the dtype has no such subnormal
      want_log.push_back(std::log(x.get(i)));
      want_sqrt.push_back(std::sqrt(x.get(i)));
    }
    // Relative error only: an absolute bound would accept 0 for sqrt(1e-40) = 1e-20.
    const Tolerance tol{dtype == DType::BF16 ? 0x1p-8 : dtype == DType::F32 ? 1e-6 : 1e-14, 0.0};
    cpu().unary(UnaryKind::Log, x.ref(), y.ref());
    expect_close(y, want_log, tol);
    cpu().unary(UnaryKind::Sqrt, x.ref(), y.ref());
    expect_close(y, want_sqrt, tol);
  }
}

// Bits of element 0 of a 2-byte tensor.
uint16_t bits16(HostTensor& t) {
  uint16_t bits;
  std::memcpy(&bits, t.ref().data, 2);
  return bits;
}

// value (exactly representable in `from`) cast to a 2-byte dtype: the stored bit pattern.
uint16_t cast_bits(double value, DType from, DType to) {
  HostTensor x({}, from), y({}, to);
  x.set(0, value);
  EXPECT_EQ(x.get(0), value) << "test value not exact in the source dtype";
  cpu().cast(x.ref(), y.ref());
  return bits16(y);
}

// ReLU and its gradient on half types select on the bits (no fp32 round trip): every one of the
// 65536 values, NaNs of both signs, -0, subnormals and infinities included, against the select on
// the decoded value.
TEST(CpuRelu, HalfBitsSelectAsTheValuesDo) {
  const double nan = std::nan("");
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({65536}, dtype), g({65536}, dtype), y({65536}, dtype);
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const auto b = static_cast<uint16_t>(bits);
      std::memcpy(reinterpret_cast<uint16_t*>(x.storage.data()) + bits, &b, sizeof b);
      g.set(bits, 1.5);
    }
    const std::vector<double> vx = x.values();
    std::vector<double> want_y(vx.size()), want_gx(vx.size());
    for (size_t i = 0; i < vx.size(); ++i) {
      want_y[i] = std::isnan(vx[i]) ? nan : (vx[i] < 0 ? 0.0 : vx[i]);
      want_gx[i] = vx[i] <= 0 ? 0.0 : 1.5;  // NaN passes the gradient, as PyTorch's threshold_backward
    }
    cpu().unary(UnaryKind::Relu, x.ref(), y.ref());
    expect_close(y, want_y, kExact, "relu");
    for (size_t i = 0; i < vx.size(); ++i) {  // -0 stays -0, as x < 0 ? 0 : x keeps it
      if (vx[i] == 0.0) {
        EXPECT_EQ(std::signbit(y.get(static_cast<int64_t>(i))), std::signbit(vx[i])) << i;
      }
    }
    cpu().binary(BinaryKind::ReluBackward, g.ref(), x.ref(), y.ref());
    expect_close(y, want_gx, kExact, "relu backward");
  }
}

TEST_P(CpuCast, HalfFormatFacts) {
  for (DType from : {DType::F32, DType::F64}) {
    SCOPED_TRACE(demi::dtype_name(from));
    const double tiny = static_cast<float>(1e-8);  // exact in both sources
    EXPECT_EQ(cast_bits(tiny, from, DType::F16), 0x0000) << "1e-8 underflows in fp16";
    EXPECT_NE(cast_bits(tiny, from, DType::BF16) & 0x7fff, 0) << "1e-8 is normal in bf16";
    EXPECT_EQ(cast_bits(65504.0, from, DType::F16), 0x7bff) << "fp16 max";
    EXPECT_EQ(cast_bits(131072.0, from, DType::F16), 0x7c00) << "overflow to inf";
    EXPECT_EQ(cast_bits(-131072.0, from, DType::F16), 0xfc00);
    EXPECT_EQ(cast_bits(0x1p-24, from, DType::F16), 0x0001) << "smallest fp16 subnormal";
    EXPECT_EQ(cast_bits(0x1p-25, from, DType::F16), 0x0000) << "2^-25 ties to even (0)";
    EXPECT_EQ(cast_bits(1.5 * 0x1p-25, from, DType::F16), 0x0001) << "above the tie rounds up";
    EXPECT_EQ(cast_bits(6.103515625e-5, from, DType::F16), 0x0400) << "smallest fp16 normal";
    EXPECT_EQ(cast_bits(1.0 + 0x1p-9, from, DType::BF16), 0x3f80) << "1 + 2^-9 is 1 in bf16";
    EXPECT_EQ(cast_bits(1.0 + 0x1p-9, from, DType::F16), 0x3c02) << "but not in fp16";
    EXPECT_EQ(cast_bits(1.0 + 0x1p-11, from, DType::F16), 0x3c00) << "tie to even, down";
    EXPECT_EQ(cast_bits(1.0 + 3 * 0x1p-11, from, DType::F16), 0x3c02) << "tie to even, up";
    EXPECT_EQ(cast_bits(1.0 + 0x1p-8, from, DType::BF16), 0x3f80) << "bf16 tie to even, down";
    EXPECT_EQ(cast_bits(1.0 + 3 * 0x1p-8, from, DType::BF16), 0x3f82) << "bf16 tie to even, up";
  }
  // float64 rounds once: going through float would land on the tie and round down to even.
  EXPECT_EQ(cast_bits(1.0 + 0x1p-11 + 0x1p-40, DType::F64, DType::F16), 0x3c01);
  EXPECT_EQ(cast_bits(1.0 + 0x1p-8 + 0x1p-40, DType::F64, DType::BF16), 0x3f81);
  EXPECT_EQ(cast_bits(0x1p-25 + 0x1p-60, DType::F64, DType::F16), 0x0001);
}

TEST_P(CpuCast, NanAndInfSurviveEveryFloatingCast) {
  for (DType from : kFloating) {
    for (DType to : kFloating) {
      SCOPED_TRACE(std::string(demi::dtype_name(from)) + " -> " + demi::dtype_name(to));
      HostTensor x({3}, from), y({3}, to);
      x.set(0, std::nan(""));
      x.set(1, INFINITY);
      x.set(2, -INFINITY);
      cpu().cast(x.ref(), y.ref());
      EXPECT_TRUE(std::isnan(y.get(0)));
      EXPECT_EQ(y.get(1), INFINITY);
      EXPECT_EQ(y.get(2), -INFINITY);
    }
  }
}

TEST_P(CpuCast, EveryPairRoundTripsSmallIntegers) {
  const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::U8};
  const double values[] = {0, 1, 2, 3, 5, 100, 255};
  for (DType from : all) {
    for (DType to : all) {
      SCOPED_TRACE(std::string(demi::dtype_name(from)) + " -> " + demi::dtype_name(to));
      HostTensor x({7}, from), y({7}, to);
      for (int i = 0; i < 7; ++i) x.set(i, values[i]);
      cpu().cast(x.ref(), y.ref());
      for (int i = 0; i < 7; ++i) EXPECT_EQ(y.get(i), values[i]);
    }
  }
}

TEST_P(CpuCast, FloatToIntegerTruncatesTowardZero) {
  for (DType from : kFloating) {
    SCOPED_TRACE(demi::dtype_name(from));
    HostTensor x({5}, from), i64({5}, DType::I64);
    const double values[] = {2.75, -2.75, 0.5, -0.5, 200.5};
    for (int i = 0; i < 5; ++i) x.set(i, values[i]);
    cpu().cast(x.ref(), i64.ref());
    const double expected[] = {2, -2, 0, 0, 200};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(i64.get(i), expected[i]) << "element " << i;
    HostTensor small({3}, from), u8({3}, DType::U8);
    small.set(0, 2.75);
    small.set(1, -0.5);
    small.set(2, 127.5);
    cpu().cast(small.ref(), u8.ref());
    EXPECT_EQ(u8.get(0), 2);
    EXPECT_EQ(u8.get(1), 0);
    EXPECT_EQ(u8.get(2), 127);
  }
  HostTensor big({}, DType::I64), f64({}, DType::F64);
  *static_cast<int64_t*>(big.ref().data) = (int64_t{1} << 53) + 1;
  cpu().cast(big.ref(), f64.ref());
  EXPECT_EQ(f64.get(0), 0x1p53) << "2^53 + 1 rounds to even";
}

TEST_P(CpuCast, RejectsValuesAnIntegerCannotHold) {
  HostTensor x({4}, DType::F32), i64({4}, DType::I64), u8({4}, DType::U8);
  x.set(0, 1.0);
  x.set(1, 2.0);
  x.set(2, std::nan(""));
  x.set(3, 3.0);
  try {
    cpu().cast(x.ref(), i64.ref());
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 2"), std::string::npos) << e.what();
  }
  x.set(2, 256.0);
  EXPECT_THROW(cpu().cast(x.ref(), u8.ref()), demi::Error);
  x.set(2, INFINITY);
  EXPECT_THROW(cpu().cast(x.ref(), i64.ref()), demi::Error);
  HostTensor neg({1}, DType::I64);
  neg.set(0, -1);
  EXPECT_THROW(cpu().cast(neg.ref(), u8.ref()), demi::Error);
  HostTensor wrong({5}, DType::F32);
  EXPECT_THROW(cpu().cast(x.ref(), wrong.ref()), demi::Error);
}

TEST(CpuFill, EveryDtype) {
  for (DType dtype : kFloating) {
    HostTensor y({40000}, dtype);
    cpu().fill(y.ref(), 2.5);
    EXPECT_EQ(y.get(0), 2.5);
    EXPECT_EQ(y.get(39999), 2.5);
  }
  HostTensor i64({3}, DType::I64), u8({3}, DType::U8), h({}, DType::F16);
  cpu().fill(i64.ref(), -7.9);
  EXPECT_EQ(i64.get(2), -7);
  cpu().fill(u8.ref(), 200);
  EXPECT_EQ(u8.get(1), 200);
  cpu().fill(h.ref(), 1.0 + 0x1p-11 + 0x1p-40);
  EXPECT_EQ(bits16(h), 0x3c01) << "fill rounds a double once";
  cpu().fill(h.ref(), 1e-8);
  EXPECT_EQ(bits16(h), 0x0000);
  EXPECT_THROW(cpu().fill(i64.ref(), std::nan("")), demi::Error);
  EXPECT_THROW(cpu().fill(u8.ref(), 300), demi::Error);
}

}  // namespace

// Values and gradients at the edges where demi differed from PyTorch until crosscheck/
// (scripts/crosscheck-pytorch) held the two side by side: every expected value below is what
// PyTorch 2.15 gave on the same inputs. 67 elements where the kernels have vector bodies and tails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "framework/demi/demi.h"

namespace demi {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// `pattern` repeated to n values.
std::vector<float> repeat(const std::vector<float>& pattern, size_t n = 67) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern[i % pattern.size()];
  return v;
}

// The gradient of sum(f(x) * gy) with respect to x of `dtype`, as floats.
std::vector<float> grad_of(const std::vector<float>& x, DType dtype, const std::function<Tensor(const Tensor&)>& f,
                           float gy = 1.0f) {
  Tensor t = tensor(x, {static_cast<int64_t>(x.size())}, dtype).requires_grad_();
  f(t).backward(full({static_cast<int64_t>(x.size())}, gy, dtype));
  return t.grad().to_vector<float>();
}

// Equal, NaN to NaN, and zeros of the same sign.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]);
    EXPECT_TRUE(same) << what << " [" << i << "]: " << got[i] << ", PyTorch " << want[i];
  }
}

TEST(PyTorchEdges, ClampPassesTheGradientStrictlyInsideTheBoundsOnly) {
  const std::vector<float> x = repeat({-0.5f, 0.7f, 1.0f, -0.6f, 0.0f, kNaN});
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_same(grad_of(x, dtype, [](const Tensor& t) { return clamp(t, -0.5, 0.7); }), repeat({0, 0, 0, 0, 1, 0}), "min and max");
    expect_same(grad_of(x, dtype, [](const Tensor& t) { return clamp(t, -0.5); }), repeat({0, 1, 1, 0, 1, 0}), "min");
    expect_same(grad_of(x, dtype, [](const Tensor& t) { return clamp(t, std::nullopt, 0.7); }), repeat({1, 0, 0, 1, 1, 0}),
                "max");
    // An infinite upstream gradient where the bound holds gives 0, not inf * 0 = NaN.
    expect_same(grad_of(x, dtype, [](const Tensor& t) { return clamp(t, -0.5, 0.7); }, kInf), repeat({0, 0, 0, 0, kInf, 0}),
                "inf upstream");
  }
  // A bound compares in x's dtype: 0.7 is 0.69921875 in bf16, so that x is at the bound.
  expect_same(grad_of(repeat({0.69921875f, 0.703125f, 0.6875f}), DType::BF16, [](const Tensor& t) { return clamp(t, -0.5, 0.7); }),
              repeat({0, 0, 1}), "bf16 bound");
}

TEST(PyTorchEdges, ReluPassesTheGradientAtNaN) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_same(grad_of(repeat({kNaN, -1.0f, 0.0f, -0.0f, 2.0f, -kNaN}), dtype, [](const Tensor& t) { return relu(t); }),
                repeat({1, 0, 0, 0, 1, 1}), "relu");
  }
}

TEST(PyTorchEdges, PowOfExponentZeroHasAZeroGradient) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    expect_same(grad_of(repeat({0.0f, -0.0f, kNaN, 1e-40f, 2.0f, kInf}), dtype, [](const Tensor& t) { return pow(t, 0.0); }),
                repeat({0}), "pow 0");
  }
}

TEST(PyTorchEdges, PowSquareRootsAndReciprocals) {
  const std::vector<float> x = repeat({-kInf, -0.0f, 0.0f, 4.0f});
  const Tensor t = tensor(x, {67});
  expect_same(pow(t, 0.5).to_vector<float>(), repeat({kNaN, -0.0f, 0.0f, 2.0f}), "pow 0.5");
  expect_same(pow(t, -0.5).to_vector<float>(), repeat({kNaN, -kInf, kInf, 0.5f}), "pow -0.5");
  expect_same(pow(t, -1.0).to_vector<float>(), repeat({-0.0f, -kInf, kInf, 0.25f}), "pow -1");
}

TEST(PyTorchEdges, ScalarProductsKeepNegativeZeroAndDivisionIsCorrectlyRounded) {
  const Tensor z = tensor(repeat({-0.0f}), {67});
  expect_same((z * 2.0).to_vector<float>(), repeat({-0.0f}), "-0 * 2");
  expect_same((z / 3.0).to_vector<float>(), repeat({-0.0f}), "-0 / 3");
  expect_same((z + 0.0).to_vector<float>(), repeat({0.0f}), "-0 + 0");  // IEEE, and PyTorch
  expect_same((-tensor(repeat({0.0f, -0.0f}), {67})).to_vector<float>(), repeat({-0.0f, 0.0f}), "-x");
  // sqrt's gradient 1 / (2 sqrt x) at -0 is -inf: 2 * y kept y's sign.
  expect_same(grad_of(repeat({-0.0f, 0.0f}), DType::F32, [](const Tensor& t) { return sqrt(t); }), repeat({-kInf, kInf}),
              "sqrt at -0");
  Generator gen(4);
  const Tensor x = randn({1000}, gen);
  const std::vector<float> v = x.to_vector<float>(), q = (x / 3.0).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(q[i], v[i] / 3.0f) << i;
  Tensor y = x.clone();
  y.div_(3.0);
  EXPECT_EQ(y.to_vector<float>(), q) << "div_ as /";
}

TEST(PyTorchEdges, AFloat32ScalarTensorMultipliesAndDividesHalfTensorsAtItsOwnPrecision) {
  // x * torch.tensor(1.0003) and x / torch.tensor(1.0003) on float16 x: the scalar is not
  // rounded to float16 first (which would give 1000 in both). s * x, x + s and s - x do round
  // it first in PyTorch (1000, 1000, 1000 below).
  const Tensor x = tensor(repeat({1000.0f, 3.0f}), {67}, DType::F16);
  const Tensor s = full({}, 1.0003), big = full({}, 1000.2), small = tensor(repeat({0.2f}), {67}, DType::F16);
  EXPECT_EQ((x * s).dtype(), DType::F16);
  expect_same((x * s).to_vector<float>(), repeat({1000.5f, 3.0f}), "x * s");
  expect_same((x / s).to_vector<float>(), repeat({999.5f, 3.0f}), "x / s");
  expect_same((s * x).to_vector<float>(), repeat({1000.0f, 3.0f}), "s * x");
  expect_same((small + big).to_vector<float>(), repeat({1000.0f}), "x + s");
  expect_same((big - small).to_vector<float>(), repeat({1000.0f}), "s - x");
  // The gradient grad_y * s takes the same path: d(x * s)/dx at grad_y = 1000.
  expect_same(grad_of(repeat({1.0f}), DType::F16, [&](const Tensor& t) { return t * s; }, 1000.0f), repeat({1000.5f}),
              "grad of x * s");
}

TEST(PyTorchEdges, DivGradientOfTheDenominatorDividesTwice) {
  // grad_b = -gy * ((a / b) / b): 0 at a = 0 even where b * b underflows to 0 (0 / 0 was NaN).
  Tensor a = tensor(repeat({0.0f, 1.0f}), {67}).requires_grad_();
  Tensor b = tensor(repeat({1e-45f, 2.0f}), {67}).requires_grad_();
  (a / b).backward(ones({67}));
  EXPECT_EQ(b.grad().to_vector<float>(), repeat({0.0f, -0.25f}));  // PyTorch's zero is -0: not compared
}

}  // namespace
}  // namespace demi

// demi::layer_norm against its formula computed with other ops in float64: over one and two
// trailing dims, with and without weight and bias, half inputs beside fp32 or half parameters, the
// gradients against the formula's, a row whose large mean defeats E[x^2] - E[x]^2, autocast, and
// the errors that name the mismatched shape or dtype.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/amp/autocast.h"
#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

// layer_norm's formula with reductions and arithmetic, in float64.
Tensor formula(const Tensor& x, int64_t dims, const Tensor& w, const Tensor& b, double eps = 1e-5) {
  std::vector<int64_t> last;
  for (int64_t d = x.dim() - dims; d < x.dim(); ++d) last.push_back(d);
  const Tensor x64 = x.to(DType::F64);
  const Tensor centred = x64 - mean(x64, last, true);
  Tensor y = centred / sqrt(mean(centred * centred, last, true) + eps);
  if (w.defined()) y = y * w.to(DType::F64);
  if (b.defined()) y = y + b.to(DType::F64);
  return y;
}

void expect_near_all(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(DType::F64).to_vector<double>(), w = want.to(DType::F64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << what << " element " << i;
  }
}

TEST(LayerNorm, MatchesItsFormulaOverOneAndTwoTrailingDims) {
  Generator gen(1);
  const Tensor x = randn({2, 3, 4, 5}, gen) * 3.0 + 1.0;
  for (const Shape& norm : {Shape{5}, Shape{4, 5}, Shape{3, 4, 5}}) {
    const Tensor w = randn(norm, gen), b = randn(norm, gen);
    const int64_t k = static_cast<int64_t>(norm.size());
    expect_near_all(layer_norm(x, norm, w, b), formula(x, k, w, b), 1e-5, "weight and bias");
    expect_near_all(layer_norm(x, norm), formula(x, k, Tensor(), Tensor()), 1e-5, "neither");
    expect_near_all(layer_norm(x, norm, w), formula(x, k, w, Tensor()), 1e-5, "weight only");
    expect_near_all(layer_norm(x, norm, Tensor(), b), formula(x, k, Tensor(), b), 1e-5, "bias only");
    expect_near_all(layer_norm(x, norm, w, b, 0.5), formula(x, k, w, b, 0.5), 1e-5, "eps 0.5");
  }
  EXPECT_EQ(layer_norm(x, {5}).shape(), x.shape());
}

TEST(LayerNorm, GradientsAreTheFormulas) {
  Generator gen(2);
  const Tensor x0 = randn({6, 3, 8}, gen), w0 = randn({3, 8}, gen), b0 = randn({3, 8}, gen), gy = randn({6, 3, 8}, gen);
  Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  layer_norm(x, {3, 8}, w, b).backward(gy);
  Tensor x64 = x0.to(DType::F64).requires_grad_(), w64 = w0.to(DType::F64).requires_grad_();
  Tensor b64 = b0.to(DType::F64).requires_grad_();
  formula(x64, 2, w64, b64).backward(gy.to(DType::F64));
  expect_near_all(x.grad(), x64.grad(), 1e-5, "grad x");
  expect_near_all(w.grad(), w64.grad(), 1e-5, "grad weight");
  expect_near_all(b.grad(), b64.grad(), 1e-5, "grad bias");
}

TEST(LayerNorm, HalfInputsKeepTheirDtypeBesideFp32OrHalfParameters) {
  Generator gen(3);
  const Tensor x32 = randn({4, 16}, gen), w32 = randn({16}, gen), b32 = randn({16}, gen);
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(half));
    const Tensor x = x32.to(half).requires_grad_();
    Tensor w = w32.clone().requires_grad_(), b = b32.clone().requires_grad_();
    const Tensor y = layer_norm(x, {16}, w, b);
    EXPECT_EQ(y.dtype(), half);
    // computed in fp32 from the half values and rounded once
    EXPECT_EQ(y.to_vector<float>(), formula(x.detach(), 1, w32, b32).to(half).to_vector<float>());
    y.backward(ones_like(y));
    EXPECT_EQ(x.grad().dtype(), half);
    EXPECT_EQ(w.grad().dtype(), DType::F32);
    EXPECT_EQ(b.grad().dtype(), DType::F32);
    const Tensor wh = w32.to(half).requires_grad_();
    const Tensor yh = layer_norm(x.detach(), {16}, wh, b32.to(half));
    EXPECT_EQ(yh.dtype(), half);
    yh.sum().backward();
    EXPECT_EQ(wh.grad().dtype(), half);
  }
}

// x = 1e4 + N(0, 1) in fp32: E[x^2] - E[x]^2 would lose the variance (1e8 has an ulp of 8).
TEST(LayerNorm, ARowWithALargeMeanKeepsFp32Accuracy) {
  Generator gen(4);
  const Tensor x = randn({3, 256}, gen) + 1e4;
  expect_near_all(layer_norm(x, {256}), formula(x, 1, Tensor(), Tensor()), 1e-5, "large mean");
}

TEST(LayerNorm, RunsInFp32UnderAutocast) {
  Generator gen(5);
  const Tensor x = randn({4, 8}, gen), w = ones({8}), b = zeros({8});
  amp::AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  EXPECT_EQ(layer_norm(x, {8}, w, b).dtype(), DType::F32);
  EXPECT_EQ(layer_norm(x.to(DType::BF16), {8}, w, b).dtype(), DType::F32);  // PyTorch's CPU list: bf16
  EXPECT_EQ(layer_norm(x.to(DType::F16), {8}, w.to(DType::BF16), b.to(DType::BF16)).dtype(), DType::F32);
  // mixed dtypes are cast first, as for every Fp32 op
  EXPECT_EQ(layer_norm(x, {8}, w.to(DType::BF16), b).dtype(), DType::F32);
}

TEST(LayerNorm, ErrorsNameTheMismatchedShapeOrDtype) {
  const Tensor x = zeros({2, 3, 4});
  EXPECT_THAT(error_of([&] { layer_norm(x, {3}); }),
              HasSubstr("layer_norm: input [2, 3, 4] does not end in normalized_shape [3]; expected an input of "
                        "shape [*, 3]"));
  EXPECT_THAT(error_of([&] { layer_norm(x, {2, 2, 3, 4}); }), HasSubstr("expected an input of shape [*, 2, 2, 3, 4]"));
  EXPECT_THAT(error_of([&] { layer_norm(x, {}); }), HasSubstr("normalized_shape must have at least one dimension"));
  EXPECT_THAT(error_of([&] { layer_norm(x, {4}, zeros({3})); }),
              HasSubstr("layer_norm: weight must have normalized_shape [4], got [3]"));
  EXPECT_THAT(error_of([&] { layer_norm(x, {3, 4}, Tensor(), zeros({12})); }),
              HasSubstr("layer_norm: bias must have normalized_shape [3, 4], got [12]"));
  EXPECT_THAT(error_of([&] { layer_norm(x, {4}, zeros({4}, DType::F16)); }),
              HasSubstr("layer_norm: weight is float16 but input is float32; give it input's dtype"));
  EXPECT_THAT(error_of([&] { layer_norm(x.to(DType::BF16), {4}, zeros({4}, DType::F16)); }),
              HasSubstr("give it input's dtype or float32"));
  EXPECT_THAT(error_of([&] { layer_norm(x.to(DType::BF16), {4}, zeros({4}), zeros({4}, DType::BF16)); }),
              HasSubstr("layer_norm: weight is float32 but bias is bfloat16; give them one dtype"));
  EXPECT_THAT(error_of([&] { layer_norm(zeros({2, 4}, DType::I64), {4}); }), HasSubstr("layer_norm"));
}

}  // namespace
}  // namespace demi

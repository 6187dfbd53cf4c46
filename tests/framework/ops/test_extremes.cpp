// max / min (whole tensor and along a dim), amax / amin and argmin with PyTorch's values, indices
// and gradients: ties share the gradient evenly (amax, and max over every element), max(x, dim)
// gives it to the indexed element, and NaN propagates with PyTorch's two gradient rules (expected
// values below are PyTorch 2.x's on the same inputs, worked by hand).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }

// The gradient of sum(f(x)) with respect to x.
std::vector<float> grad_of(const Tensor& x0, const std::function<Tensor(const Tensor&)>& f) {
  Tensor x = x0.clone().requires_grad_();
  sum(f(x)).backward();
  return values(x.grad());
}

MATCHER(IsNan, "is NaN") { return std::isnan(arg); }

TEST(Extremes, WholeTensorMaxAndMinAreZeroDim) {
  const Tensor x = tensor({3, -1, 7, 2, 7, -4}, {2, 3});
  EXPECT_EQ(max(x).dim(), 0);
  EXPECT_EQ(max(x).item(), 7.0);
  EXPECT_EQ(min(x).item(), -4.0);
  EXPECT_EQ(x.max().item(), 7.0);
  EXPECT_EQ(x.min().item(), -4.0);
  for (DType d : {DType::F16, DType::BF16, DType::F64}) EXPECT_EQ(max(x.to(d)).dtype(), d);
  const Tensor labels = tensor(std::vector<int64_t>{4, 9, 2}, {3});  // integers keep their dtype
  EXPECT_EQ(max(labels).dtype(), DType::I64);
  EXPECT_EQ(max(labels).item(), 9.0);
  EXPECT_EQ(max(full({}, 2.5)).item(), 2.5);  // a 0-d tensor is its own maximum
  EXPECT_EQ(grad_of(full({}, 2.5), [](const Tensor& x) { return min(x); }), (std::vector<float>{1}));
  EXPECT_TRUE(std::isnan(max(tensor({1, kNan, 3}, {3})).item()));  // NaN propagates
  EXPECT_TRUE(std::isnan(min(tensor({1, kNan, 3}, {3})).item()));
}

TEST(Extremes, WholeTensorGradientIsSharedAmongTiesAndAmongNans) {
  EXPECT_EQ(grad_of(tensor({1, 3, 3, 2}, {4}), [](const Tensor& x) { return max(x); }),
            (std::vector<float>{0, 0.5f, 0.5f, 0}));
  EXPECT_EQ(grad_of(tensor({1, -3, 2, -3, -3}, {5}), [](const Tensor& x) { return min(x); }),
            (std::vector<float>{0, 1.0f / 3, 0, 1.0f / 3, 1.0f / 3}));
  // PyTorch's evenly_distribute_backward: a NaN result shares the gradient among the NaNs
  EXPECT_EQ(grad_of(tensor({1, kNan, 2, kNan}, {4}), [](const Tensor& x) { return max(x); }),
            (std::vector<float>{0, 0.5f, 0, 0.5f}));
  // and it writes +0 elsewhere, whatever the sign of the gradient (amax multiplies: -0 there, as PyTorch)
  const std::vector<float> negative = grad_of(tensor({1, 3, 2}, {3}), [](const Tensor& x) { return -max(x); });
  EXPECT_EQ(negative, (std::vector<float>{0, -1, 0}));
  EXPECT_FALSE(std::signbit(negative[0]));
  EXPECT_TRUE(std::signbit(grad_of(tensor({1, 3, 2}, {3}), [](const Tensor& x) { return -amax(x, {0}); })[0]));
}

TEST(Extremes, AmaxAndAminOverDims) {
  const Tensor x = tensor({1, 5, 3, 4, 2, 6}, {2, 3});
  EXPECT_EQ(values(amax(x, {1})), (std::vector<float>{5, 6}));
  EXPECT_EQ(values(amin(x, {0})), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(amax(x, {-1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(amax(x).dim(), 0);  // no dims: all of them
  EXPECT_EQ(x.amax({0, 1}).item(), 6.0);
  EXPECT_EQ(x.amin({1}, true).shape(), (Shape{2, 1}));
  EXPECT_THAT(values(amax(tensor({1, kNan, 3, 4}, {2, 2}), {1})), testing::ElementsAre(IsNan(), 4.0f));
}

TEST(Extremes, AmaxGradientIsSharedPerSliceAndNanForANanSlice) {
  EXPECT_EQ(grad_of(tensor({1, 3, 3, 2, 2, 0}, {2, 3}), [](const Tensor& x) { return amax(x, {1}); }),
            (std::vector<float>{0, 0.5f, 0.5f, 0.5f, 0.5f, 0}));
  EXPECT_EQ(grad_of(tensor({4, 1, 1, 4}, {2, 2}), [](const Tensor& x) { return amin(x, {0}, true); }),
            (std::vector<float>{0, 1, 1, 0}));
  // PyTorch's scale_grad_by_count: no element equals a NaN result, so its slice gets grad / 0 * 0
  EXPECT_THAT(grad_of(tensor({1, kNan, 3, 4}, {2, 2}), [](const Tensor& x) { return amax(x, {1}); }),
              testing::ElementsAre(IsNan(), IsNan(), 0.0f, 1.0f));
}

TEST(Extremes, MaxAlongADimGivesValuesAndFirstIndices) {
  const Tensor x = tensor({1, 5, 5, 2, 0, -1, kNan, 3}, {2, 4});
  const auto [values_1, indices_1] = max(x, 1);
  EXPECT_THAT(values(values_1), testing::ElementsAre(5.0f, IsNan()));
  EXPECT_EQ(indices_1.dtype(), DType::I64);
  EXPECT_EQ(indices_1.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));  // ties: the first; NaN wins
  const auto [low, where_low] = x.min(0, true);
  EXPECT_EQ(low.shape(), (Shape{1, 4}));
  EXPECT_THAT(values(low), testing::ElementsAre(0.0f, -1.0f, IsNan(), 2.0f));
  EXPECT_EQ(where_low.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  const auto [v_neg, i_neg] = min(x, -1);
  EXPECT_EQ(i_neg.shape(), (Shape{2}));
  EXPECT_EQ(i_neg.to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
  const auto [scalar, at] = max(full({}, 2.5), 0);  // a 0-d tensor is its own maximum, at 0
  EXPECT_EQ(scalar.item(), 2.5);
  EXPECT_EQ(at.item(), 0.0);
  EXPECT_EQ(std::get<0>(max(tensor(std::vector<int64_t>{3, 8, 1}, {3}), 0)).dtype(), DType::I64);
}

TEST(Extremes, MaxAlongADimSendsTheGradientToTheIndex) {
  EXPECT_EQ(grad_of(tensor({1, 3, 3, 2, 0, 2}, {2, 3}), [](const Tensor& x) { return std::get<0>(max(x, 1)); }),
            (std::vector<float>{0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(grad_of(tensor({1, 3, 3, 2, 0, 2}, {2, 3}), [](const Tensor& x) { return std::get<0>(min(x, 0, true)); }),
            (std::vector<float>{1, 0, 0, 0, 1, 1}));
  // a weighted loss: each slice's gradient lands on its own index
  Tensor x = tensor({1, 9, 4, 7, 2, 8}, {3, 2}).requires_grad_();
  sum(std::get<0>(max(x, 1)) * tensor({1, 2, 3}, {3})).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 1, 0, 2, 0, 3}));
}

TEST(Extremes, ArgminBesideArgmax) {
  const Tensor x = tensor({3, 1, 1, 2, 0, 5, kNan, -1}, {2, 4});
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));  // ties: the first; NaN wins
  EXPECT_EQ(x.argmin(0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(argmin(x, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmin(tensor({4, 2, 2, 9}, {2, 2})).item(), 1.0);  // flattened, 0-d
  EXPECT_EQ(argmin(tensor(std::vector<int64_t>{5, -3, 0}, {3})).item(), 1.0);
}

TEST(Extremes, ErrorsNameTheFunctionAndTheShape) {
  EXPECT_THAT(error_of([] { max(zeros({0, 3})); }), HasSubstr("max: the input [0, 3] is empty"));
  EXPECT_THAT(error_of([] { amin(zeros({2, 0}), {1}); }), HasSubstr("amin: the input [2, 0] is empty along the reduced dims"));
  EXPECT_EQ(amax(zeros({0, 3}), {1}).shape(), (Shape{0}));  // no outputs: nothing to refuse
  EXPECT_THAT(error_of([] { max(zeros({2, 3}), 2); }), HasSubstr("max: dim 2 out of range for a tensor of shape [2, 3]"));
  EXPECT_THAT(error_of([] { min(zeros({2, 0}), 1); }), HasSubstr("min: the input [2, 0] is empty along dim 1, so it has no minimum"));
  EXPECT_THAT(error_of([] { amax(zeros({2, 3}), {1, -1}); }), HasSubstr("amax: a dim appears twice"));
  EXPECT_THAT(error_of([] { argmin(zeros({2, 3}), -3); }), HasSubstr("argmin: dim -3 out of range"));
  EXPECT_THAT(error_of([] { max(Tensor()); }), HasSubstr("max: the input is undefined"));
}

}  // namespace
}  // namespace demi

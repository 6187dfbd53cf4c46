// where and masked_fill as PyTorch has them: cond, a and b broadcast together, a select (an inf or
// NaN in the branch not taken never reaches the result or the gradient), scalars that take the
// tensor's dtype, gradients masked and summed back to each operand's shape; and abs with its
// gradient sign(x) * g. Expected values are PyTorch 2.x's on the same inputs, worked by hand.
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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }
Tensor mask(std::initializer_list<float> v, const Shape& s) { return tensor(v, s, DType::U8); }

TEST(Where, BroadcastsAllThreeOperands) {
  const Tensor cond = mask({1, 0, 1, 0, 0, 1}, {2, 1, 3});
  const Tensor a = tensor({10, 20}, {2, 1}), b = full({}, -1.0);
  const Tensor y = where(cond, a, b);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(y), (std::vector<float>{10, -1, 10, 20, -1, 20, -1, -1, 10, -1, -1, 20}));
  EXPECT_EQ(values(where(mask({0, 2}, {2}), tensor({1, 2}, {2}), tensor({3, 4}, {2}))),
            (std::vector<float>{3, 2}));  // any nonzero byte is true
}

TEST(Where, IsASelectSoTheOtherBranchNeverLeaks) {
  const Tensor x = tensor({-1, 0, 4, kNan}, {4});
  const Tensor y = where(x > 0.0, sqrt(x), full({4}, kInf));  // sqrt(-1) is NaN, not taken
  EXPECT_EQ(values(y), (std::vector<float>{kInf, kInf, 2, kInf}));
  const std::vector<float> signed_zero = values(where(mask({1}, {1}), full({1}, -0.0), full({1}, 1.0)));
  EXPECT_TRUE(std::signbit(signed_zero[0]));  // bits copied: -0 stays -0
  // the gradient of the branch not taken is exactly 0, whatever that branch holds
  Tensor a = tensor({kInf, 1, kNan}, {3}).requires_grad_(), b = tensor({2, kInf, 3}, {3}).requires_grad_();
  sum(where(mask({0, 1, 0}, {3}), a, b) * tensor({5, 6, 7}, {3})).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{0, 6, 0}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{5, 0, 7}));
}

TEST(Where, GradientsSumBackToEachOperandsShape) {
  Tensor a = tensor({1, 2}, {2, 1}).requires_grad_(), b = full({}, 3.0).requires_grad_();
  const Tensor cond = mask({1, 0, 1}, {3});
  const Tensor y = where(cond, a, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  sum(y).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{2, 2}));  // two true columns per row
  EXPECT_EQ(b.grad().shape(), Shape{});
  EXPECT_EQ(b.grad().item(), 2.0);  // one false column in each of two rows
}

TEST(Where, ScalarsTakeTheTensorsDtypeAndOperandsPromote) {
  const Tensor h = tensor({1, -2, 3}, {3}, DType::BF16), cond = h > 0.0;
  EXPECT_EQ(where(cond, h, 0.0).dtype(), DType::BF16);
  EXPECT_EQ(values(where(cond, h, 0.0)), (std::vector<float>{1, 0, 3}));
  EXPECT_EQ(values(where(cond, 9.0, h)), (std::vector<float>{9, -2, 9}));
  EXPECT_EQ(where(cond, h, tensor({0, 0, 0}, {3})).dtype(), DType::F32);  // bf16 and fp32: the wider
  const Tensor labels = tensor(std::vector<int64_t>{4, 5, 6}, {3});
  EXPECT_EQ(where(cond, labels, -1.0).dtype(), DType::I64);
  EXPECT_EQ(where(cond, labels, -1.0).to_vector<int64_t>(), (std::vector<int64_t>{4, -1, 6}));
  EXPECT_EQ(where(cond, labels, 0.5).dtype(), DType::F32);  // not a whole number: floating
  // a half operand's gradient comes back in its own dtype
  Tensor hb = h.clone().requires_grad_();
  Tensor f = tensor({7, 8, 9}, {3}).requires_grad_();
  sum(where(cond, hb, f)).backward();
  EXPECT_EQ(hb.grad().dtype(), DType::BF16);
  EXPECT_EQ(values(hb.grad()), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(values(f.grad()), (std::vector<float>{0, 1, 0}));
}

TEST(Where, MaskedFillFillsWhereTheMaskHoldsAndBlocksItsGradient) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor m = mask({0, 1, 1}, {3});  // broadcast over the rows
  const Tensor y = masked_fill(x, m, -kInf);
  EXPECT_EQ(values(y), (std::vector<float>{1, -kInf, -kInf, 4, -kInf, -kInf}));
  EXPECT_EQ(values(x.masked_fill(m, 0.5)), (std::vector<float>{1, 0.5f, 0.5f, 4, 0.5f, 0.5f}));
  sum(softmax(y, -1)).backward();  // attention's mask: the filled logits get no gradient
  const std::vector<float> g = values(x.grad());
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_EQ(g[5], 0.0f);
  EXPECT_EQ(masked_fill(tensor({1, 2}, {2}, DType::F16), mask({1, 0}, {2}), 7.0).dtype(), DType::F16);
}

TEST(Where, ErrorsNameTheCulpritAndTheFix) {
  const Tensor x = zeros({2, 3});
  EXPECT_THAT(error_of([&] { where(x, x, x); }), HasSubstr("where: cond must be a uint8 mask"));
  EXPECT_THAT(error_of([&] { where(x > 0.0, x, zeros({4})); }), HasSubstr("where: shapes [2, 3] and [4] cannot be broadcast"));
  EXPECT_THAT(error_of([&] { masked_fill(x, x, 1.0); }), HasSubstr("masked_fill: mask must be a uint8 mask"));
  EXPECT_THAT(error_of([&] { masked_fill(x, mask({1, 0}, {2}), 1.0); }),
              HasSubstr("masked_fill: shapes [2, 3] and [2] cannot be broadcast"));
  EXPECT_THAT(error_of([&] { where(Tensor(), x, x); }), HasSubstr("where: cond is undefined"));
  const Tensor labels = tensor(std::vector<int64_t>{1, 2}, {2});
  EXPECT_EQ(masked_fill(labels, mask({0, 1}, {2}), -100.0).to_vector<int64_t>(), (std::vector<int64_t>{1, -100}));
  EXPECT_THAT(error_of([&] { masked_fill(labels, mask({0, 1}, {2}), 0.5); }),
              HasSubstr("masked_fill: the value 0.5 is not a whole number and the tensor is int64"));
}

TEST(Abs, ValuesAndGradientAsPyTorch) {
  Tensor x = tensor({-2, -0.0f, 0, 3, -kInf, kNan}, {6}).requires_grad_();
  const std::vector<float> y = values(abs(x));
  EXPECT_EQ(std::vector<float>(y.begin(), y.end() - 1), (std::vector<float>{2, 0, 0, 3, kInf}));
  EXPECT_FALSE(std::signbit(y[1]));  // |-0| = +0
  EXPECT_TRUE(std::isnan(y[5]));
  sum(x.abs()).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{-1, 0, 0, 1, -1, 0}));  // sign(x): 0 at 0 and at NaN
  EXPECT_EQ(abs(ones({2}, DType::BF16)).dtype(), DType::BF16);
  EXPECT_THAT(error_of([] { abs(tensor(std::vector<int64_t>{-1}, {1})); }), HasSubstr("abs: input must be a floating"));
}

}  // namespace
}  // namespace demi

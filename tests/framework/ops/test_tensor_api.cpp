// The libtorch-shaped surface: Tensor methods equal their free functions, in-place methods write
// into the tensor's own storage and refuse what autograd cannot follow, comparisons give uint8
// masks that mix with floating tensors, and transpose / select / cat / clamp / argmax give
// PyTorch's values (expected values below are PyTorch 2.x's on the same inputs, worked by hand).
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

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// [[0, 1, 2], [3, 4, 5]]
Tensor iota23() { return tensor({0, 1, 2, 3, 4, 5}, {2, 3}); }

TEST(TensorApi, MethodsEqualTheirFreeFunctions) {
  Generator gen(1);
  const Tensor x = randn({3, 4}, gen), y = randn({4, 2}, gen);
  EXPECT_EQ(values(x.sum()), values(sum(x)));
  EXPECT_EQ(values(x.sum({1}, true)), values(sum(x, {1}, true)));
  EXPECT_EQ(values(x.mean({0})), values(mean(x, {0})));
  EXPECT_EQ(values(x.exp()), values(exp(x)));
  EXPECT_EQ(values(x.exp().log()), values(log(exp(x))));
  EXPECT_EQ(values(x.exp().sqrt()), values(sqrt(exp(x))));
  EXPECT_EQ(values(x.pow(3.0)), values(pow(x, 3.0)));
  EXPECT_EQ(values(x.relu()), values(relu(x)));
  EXPECT_EQ(values(x.gelu()), values(gelu(x)));
  EXPECT_EQ(values(x.neg()), values(-x));
  EXPECT_EQ(values(x.softmax(1)), values(softmax(x, 1)));
  EXPECT_EQ(values(x.log_softmax()), values(log_softmax(x)));
  EXPECT_EQ(values(x.matmul(y)), values(matmul(x, y)));
  EXPECT_EQ(values(x.clamp(-0.5, 0.5)), values(clamp(x, -0.5, 0.5)));
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), argmax(x, 1).to_vector<int64_t>());
}

TEST(TensorApi, ItemDefaultsToDouble) {
  EXPECT_EQ(full({}, 2.5).item(), 2.5);
  EXPECT_EQ(tensor(std::vector<int64_t>{7}, {1}).item(), 7.0);
  EXPECT_EQ(full({1}, 0.1, DType::BF16).item(), full({1}, 0.1, DType::BF16).item<double>());
}

TEST(TensorApi, TransposeAndT) {
  const Tensor t = iota23().t();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(t), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // [2, 3, 4] with dims 0 and 2 swapped: y[k][j][i] = x[i][j][k] = 12 i + 4 j + k
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor y = tensor(v, {2, 3, 4}).transpose(0, -1);
  EXPECT_EQ(y.shape(), (Shape{4, 3, 2}));
  const std::vector<float> got = values(y);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) EXPECT_EQ(got[static_cast<size_t>((k * 3 + j) * 2 + i)], 12 * i + 4 * j + k);
  EXPECT_EQ(values(tensor({1, 2, 3}, {3}).t()), (std::vector<float>{1, 2, 3}));  // 1-D: itself
  EXPECT_THAT(error_of([] { zeros({2, 2, 2}).t(); }), HasSubstr("t(): expects a tensor of at most 2 dims"));
  EXPECT_THAT(error_of([] { transpose(zeros({2, 2}), 0, 2); }), HasSubstr("transpose: dim 2 out of range"));
  // every dtype moves bit for bit
  for (DType d : {DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8}) {
    EXPECT_EQ(values(iota23().to(d).t()), values(t)) << dtype_name(d);
  }
}

TEST(TensorApi, IndexingTheFirstDimensionIsAView) {
  Tensor x = iota23();
  EXPECT_EQ(values(x[1]), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(values(x[-2]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(x[0][2].item(), 2.0);
  x[1].fill_(9);  // writes reach x, as x[1].fill_(9) does in libtorch
  EXPECT_EQ(values(x), (std::vector<float>{0, 1, 2, 9, 9, 9}));
  EXPECT_THAT(error_of([&] { x[2]; }), HasSubstr("index 2 is out of range for dim 0 of extent 2"));
  EXPECT_THAT(error_of([&] { x.select(1, 0); }), HasSubstr("only dim 0 can be selected"));
}

TEST(TensorApi, CatJoinsAndPromotes) {
  const Tensor a = iota23(), b = tensor({6, 7, 8}, {1, 3});
  EXPECT_EQ(values(cat({a, b})), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  const Tensor c = cat({a, tensor({10, 11}, {2, 1})}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 4}));
  EXPECT_EQ(values(c), (std::vector<float>{0, 1, 2, 10, 3, 4, 5, 11}));
  EXPECT_EQ(cat({a.to(DType::BF16), b}).dtype(), DType::F32);  // promotes, as torch.cat
  EXPECT_EQ(cat({a.to(DType::BF16), b.to(DType::BF16)}).dtype(), DType::BF16);
  EXPECT_THAT(error_of([&] { cat({a, zeros({2, 2})}); }),
              HasSubstr("cat: tensor 1 has shape [2, 2] but tensor 0 has [2, 3]; all dims except dim 0 must match"));
  EXPECT_THAT(error_of([] { cat({}); }), HasSubstr("cat: expects a non-empty list"));
}

TEST(TensorApi, ClampFollowsPyTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor({-2.0f, -0.5f, 0.0f, 0.7f, 3.0f, nan}, {6});
  const std::vector<float> both = values(clamp(x, -1.0, 1.0));
  EXPECT_EQ(std::vector<float>(both.begin(), both.end() - 1), (std::vector<float>{-1, -0.5, 0, 0.7f, 1}));
  EXPECT_TRUE(std::isnan(both.back()));  // NaN stays NaN
  EXPECT_EQ(values(x.clamp(std::nullopt, 0.0)).front(), -2.0f);
  EXPECT_EQ(values(x.clamp(0.5)).front(), 0.5f);
  EXPECT_EQ(values(clamp(x, 1.0, -1.0)).front(), -1.0f);  // min > max: every element is max
  EXPECT_THAT(error_of([&] { clamp(x, std::nullopt, std::nullopt); }), HasSubstr("at least one of min and max"));
  // the gradient passes strictly inside (min, max): PyTorch 2.15 gives 0 at the bounds (crosscheck/)
  Tensor w = tensor({-2.0f, -1.0f, 0.0f, 1.0f, 2.0f}, {5}).requires_grad_();
  sum(clamp(w, -1.0, 1.0)).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<float>{0, 0, 1, 0, 0}));
}

TEST(TensorApi, ArgmaxFirstMaximumAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor({1, 5, 5, 2, 0, -1, nan, 3}, {2, 4});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));  // ties: the first; NaN wins
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(argmax(x, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(tensor({1, 5, 5, 2}, {2, 2})).item(), 1.0);  // flattened, 0-d
  EXPECT_EQ(argmax(tensor({1, 5, 5, 2}, {2, 2})).dim(), 0);
  EXPECT_EQ(argmax(x, 1).dtype(), DType::I64);
  EXPECT_EQ(argmax(tensor(std::vector<int64_t>{3, 9, 2}, {3})).item(), 1.0);  // integers too
  EXPECT_THAT(error_of([] { argmax(zeros({2, 0}), 1); }), HasSubstr("is empty along the reduced dim"));
}

TEST(TensorApi, ComparisonsGiveUint8MasksThatMixWithFloats) {
  const Tensor x = tensor({-1.0f, 0.0f, 2.0f}, {3});
  const Tensor mask = x > 0.0;
  EXPECT_EQ(mask.dtype(), DType::U8);
  EXPECT_EQ(mask.to_vector<float>(), (std::vector<float>{0, 0, 1}));
  EXPECT_EQ(values(x >= 0.0), (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(values(x == x), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(values(x != tensor({-1.0f}, {1})), (std::vector<float>{0, 1, 1}));  // broadcasting
  EXPECT_EQ(values(x < 0.0), (std::vector<float>{1, 0, 0}));
  EXPECT_EQ(values(x <= 0.0), (std::vector<float>{1, 1, 0}));
  EXPECT_EQ(values(x * mask), (std::vector<float>{0, 0, 2}));  // a mask times a float is a float
  EXPECT_EQ((x.to(DType::BF16) * mask).dtype(), DType::BF16);
  // the accuracy idiom: (logits.argmax(1) == labels).sum().item()
  const Tensor logits = tensor({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  const Tensor labels = tensor(std::vector<int64_t>{1, 1, 1}, {3});
  const Tensor correct = (logits.argmax(1) == labels).sum();
  EXPECT_EQ(correct.dtype(), DType::I64);
  EXPECT_EQ(correct.item(), 2.0);
  EXPECT_THAT(error_of([&] { labels + labels; }), HasSubstr("both operands are integer tensors"));
}

TEST(TensorApi, IsfiniteIsnanIsinfTestEachElement) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor({1.0f, -inf, inf, nan, 0.0f, -0.0f, 1e-40f, -3e38f}, {2, 4});
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    const Tensor h = x.to(dtype);  // -3e38 is -inf in fp16, finite in bf16
    const float big = dtype == DType::F16 ? 0.0f : 1.0f;
    EXPECT_EQ(isfinite(h).dtype(), DType::U8);
    EXPECT_EQ(values(isfinite(h)), (std::vector<float>{1, 0, 0, 0, 1, 1, 1, big})) << dtype;
    EXPECT_EQ(values(isnan(h)), (std::vector<float>{0, 0, 0, 1, 0, 0, 0, 0})) << dtype;
    EXPECT_EQ(values(isinf(h)), (std::vector<float>{0, 1, 1, 0, 0, 0, 0, 1 - big})) << dtype;
  }
  const Tensor labels = tensor(std::vector<int64_t>{3, -1}, {2});
  EXPECT_EQ(values(isfinite(labels)), (std::vector<float>{1, 1}));
  EXPECT_EQ(values(isnan(labels)), (std::vector<float>{0, 0}));
  EXPECT_EQ(values(isinf(labels)), (std::vector<float>{0, 0}));
  const Tensor w = x.clone().requires_grad_();
  EXPECT_FALSE(isfinite(w).requires_grad());  // a mask, not recorded
}

TEST(TensorApi, InPlaceWritesTheTensorsOwnStorage) {
  Tensor x = iota23();
  const Tensor alias = x;  // a copy of the handle sees the change
  x.add_(1.0);
  x += tensor({1, 1, 1}, {3});  // broadcast to x's shape
  x.mul_(2.0);
  x -= 1.0;
  x.div_(tensor({1, 1, 2}, {3}));
  EXPECT_EQ(values(alias), (std::vector<float>{3, 5, 3.5f, 9, 11, 6.5f}));
  x.add_(iota23(), -1.0);
  EXPECT_EQ(values(x), (std::vector<float>{3, 4, 1.5f, 6, 7, 1.5f}));
  x.clamp_(2.0, 6.0);
  EXPECT_EQ(values(x), (std::vector<float>{3, 4, 2, 6, 6, 2}));
  x.copy_(tensor({7, 8, 9}, {3}));  // broadcast
  EXPECT_EQ(values(x), (std::vector<float>{7, 8, 9, 7, 8, 9}));
  x.zero_();
  EXPECT_EQ(values(x), std::vector<float>(6, 0.0f));
  Tensor h = zeros({2}, DType::BF16);
  h.copy_(tensor({0.1f, 1.0f}, {2}));  // converted into bf16, rounded once
  EXPECT_EQ(h.dtype(), DType::BF16);
  EXPECT_EQ(values(h), values(tensor({0.1f, 1.0f}, {2}).to(DType::BF16)));
  EXPECT_THAT(error_of([&] { x.add_(zeros({3, 2, 3})); }), HasSubstr("an in-place op keeps the shape"));
}

TEST(TensorApi, ScalarInPlaceOnIntegerTensorsStaysInteger) {
  Tensor counter = zeros({}, DType::I64);
  counter.add_(1.0);
  counter += 2.0;
  counter.mul_(5.0);
  EXPECT_EQ(counter.dtype(), DType::I64);
  EXPECT_EQ(counter.item<int64_t>(), 15);
  EXPECT_THAT(error_of([&] { counter.add_(0.5); }), HasSubstr("0.5 is not a whole number"));
}

TEST(TensorApi, InPlaceRefusesWhatAutogradCannotFollow) {
  Tensor w = ones({3}).requires_grad_();
  EXPECT_THAT(error_of([&] { w.add_(1.0); }), HasSubstr("add_: in-place on a tensor that requires grad"));
  EXPECT_THAT(error_of([&] { w[0].fill_(2.0); }), HasSubstr("fill_: in-place on a tensor that requires grad"));
  Tensor plain = ones({3});
  EXPECT_THAT(error_of([&] { plain.mul_(w); }), HasSubstr("the operand requires grad"));
  EXPECT_THAT(error_of([&] { plain.add_(w, 2.0); }), HasSubstr("the operand requires grad"));
  EXPECT_THAT(error_of([&] { plain.sub_(w, 0.5); }), HasSubstr("the operand requires grad"));
  {
    NoGradGuard no_grad;  // how optimizers and initialisers write parameters
    w.mul_(3.0);
  }
  EXPECT_EQ(values(w), (std::vector<float>{3, 3, 3}));
}

TEST(TensorApi, BackwardRefusesASavedTensorModifiedInPlace) {
  Tensor w = ones({3}).requires_grad_();
  Tensor x = tensor({1, 2, 3}, {3});
  const Tensor loss = sum(w * x);  // saves x for w's gradient
  x.mul_(10.0);                    // would make w.grad 10x wrong
  EXPECT_THAT(error_of([&] { loss.backward(); }), HasSubstr("mul: a tensor it saved for backward"));
  Tensor y = tensor({1, 2, 3}, {3});
  y.mul_(10.0);                     // before the forward pass: fine
  sum(w * y).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<float>{10, 20, 30}));
}

TEST(TensorApi, ShortConstructorsAndFunctional) {
  nn::Linear fc(4, 2);
  EXPECT_EQ(fc.weight.shape(), (Shape{2, 4}));
  EXPECT_TRUE(fc.bias.defined());
  nn::Conv2d conv(3, 8, 3);
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3, 3}));
  nn::BatchNorm2d bn(8);
  EXPECT_EQ(bn.options().num_features, 8);
  optim::SGD sgd(fc.parameters(), 0.1);
  EXPECT_EQ(sgd.lr(0), 0.1);
  EXPECT_EQ(sgd.group_options()[0].momentum, 0.0);
  optim::AdamW adamw(fc.parameters(), 3e-4);
  EXPECT_EQ(adamw.lr(0), 3e-4);
  EXPECT_EQ(adamw.group_options()[0].weight_decay, 1e-2);
  namespace F = nn::functional;
  const Tensor x = randn({2, 4});
  EXPECT_EQ(values(F::relu(F::linear(x, fc.weight, fc.bias))), values(fc(x).relu()));
}

}  // namespace
}  // namespace demi

// channels_last: the memory format tag, conversions, element-wise ops that keep it, ops that take
// it through a conversion, gradients, optimizers and modules, each against the same computation
// in the contiguous format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

std::vector<float> values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }

std::string text(const Shape& s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

Tensor iota(const Shape& s, DType dtype = DType::F32) {
  return arange(0, static_cast<double>(shape_numel(s)), 1, dtype).reshape(s);
}

// The elements of `t` (contiguous, [N, C, H, W]) in NHWC order.
std::vector<float> nhwc_order(const Tensor& t) {
  const std::vector<float> v = values(t);
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  std::vector<float> out;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t k = 0; k < c; ++k) out.push_back(v[static_cast<size_t>(((i * c + k) * h + y) * w + x)]);
  return out;
}

TEST(MemoryFormat, ChannelsLastStoresNhwcAndKeepsTheShape) {
  const Tensor x = iota({2, 3, 4, 5});
  const Tensor y = x.contiguous(kCL);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.suggest_memory_format(), kCL);
  EXPECT_TRUE(y.is_contiguous(kCL));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_EQ(values(y), values(x));  // to_vector reads the shape's order
  const float* raw = y.data<float>();
  EXPECT_EQ(std::vector<float>(raw, raw + y.numel()), nhwc_order(x));
  EXPECT_TRUE(y.contiguous(kCL).is_same(y));
  EXPECT_EQ(y.contiguous().suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_EQ(values(y.contiguous()), values(x));
  EXPECT_EQ(y.clone().suggest_memory_format(), kCL);
  EXPECT_EQ(y.detach().suggest_memory_format(), kCL);
  EXPECT_EQ(empty_like(y).suggest_memory_format(), kCL);
  EXPECT_EQ(zeros_like(y).suggest_memory_format(), kCL);
  EXPECT_EQ(values(y.slice(1, 2)), values(x.slice(1, 2)));  // rows of dim 0 stay views
  for (DType dtype : {DType::BF16, DType::F16, DType::F64}) {
    const Tensor h = y.to(dtype);
    EXPECT_EQ(h.suggest_memory_format(), kCL);
    EXPECT_EQ(values(h), values(x.to(dtype)));
  }
}

TEST(MemoryFormat, OneChannelOrOnePixelIsBothFormats) {
  for (const Shape& s : {Shape{2, 1, 3, 3}, Shape{4, 8, 1, 1}}) {
    const Tensor y = iota(s).contiguous(kCL);
    EXPECT_TRUE(y.is_contiguous()) << text(s);
    EXPECT_TRUE(y.is_contiguous(kCL)) << text(s);
    EXPECT_EQ(y.suggest_memory_format(), MemoryFormat::Contiguous) << text(s);
  }
  EXPECT_FALSE(iota({2, 3}).is_contiguous(kCL));  // channels_last is for 4-D tensors
}

TEST(MemoryFormat, ErrorsNameTheShapeAndTheFix) {
  EXPECT_THAT(error_of([] { iota({2, 3, 4}).contiguous(kCL); }), HasSubstr("needs a 4-D tensor [N, C, H, W], got shape [2, 3, 4]"));
  EXPECT_THAT(error_of([] { iota({2, 3}).contiguous(MemoryFormat::Preserve); }), HasSubstr("ask for"));
  EXPECT_THAT(error_of([] { empty({3, 4}, DType::F32, Device::cpu(), kCL); }), HasSubstr("needs a 4-D shape"));
}

TEST(MemoryFormat, ElementwiseResultsFollowTheFirstFullSizeOperand) {
  const Tensor x = randn({2, 3, 4, 5}), y = randn({2, 3, 4, 5});
  const Tensor xc = x.contiguous(kCL);
  EXPECT_EQ((xc + y).suggest_memory_format(), kCL);
  EXPECT_EQ((y + xc).suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_EQ(values(xc + y), values(x + y));
  EXPECT_EQ(values(y * xc), values(y * x));
  const Tensor bias = randn({3, 1, 1}), row = randn({2, 1, 4, 5}), odd = randn({3, 4, 1}), scalar = full({}, 0.5);
  for (const Tensor& other : {bias, row, odd, scalar}) {
    EXPECT_EQ((other + xc).suggest_memory_format(), kCL) << text(other.shape());
    EXPECT_EQ(values(xc - other), values(x - other)) << text(other.shape());
    EXPECT_EQ(values(other / xc), values(other / x)) << text(other.shape());
  }
  EXPECT_EQ(relu(xc).suggest_memory_format(), kCL);
  EXPECT_EQ(values(gelu(xc)), values(gelu(x)));
  EXPECT_EQ(values(clamp(xc, -0.5, 0.5)), values(clamp(x, -0.5, 0.5)));
  EXPECT_EQ(values(xc.abs() * 2.0 + 1.0), values(x.abs() * 2.0 + 1.0));
  EXPECT_EQ(values(xc > y), values(x > y));
  for (DType dtype : {DType::BF16, DType::F16}) {
    EXPECT_EQ(values(xc.to(dtype) * y.to(dtype) + bias), values(x.to(dtype) * y.to(dtype) + bias)) << dtype;
  }
}

TEST(MemoryFormat, OtherOpsReadTheShapesOrder) {
  const Tensor x = randn({2, 3, 4, 5});
  const Tensor xc = x.contiguous(kCL);
  EXPECT_EQ(values(xc.reshape({2, 60})), values(x.reshape({2, 60})));
  EXPECT_EQ(values(xc.flatten(1)), values(x.flatten(1)));
  EXPECT_EQ(values(xc[1]), values(x[1]));
  EXPECT_EQ(values(xc.sum({0, 2, 3})), values(x.sum({0, 2, 3})));
  EXPECT_EQ(values(xc.mean({2, 3})), values(x.mean({2, 3})));
  EXPECT_EQ(values(max_pool2d(xc, 2)), values(max_pool2d(x, 2)));
  EXPECT_EQ(values(xc.softmax(-1)), values(x.softmax(-1)));
  EXPECT_EQ(values(permute(xc, {0, 2, 3, 1})), values(permute(x, {0, 2, 3, 1})));
}

TEST(MemoryFormat, InPlaceOpsKeepTheTensorsFormat) {
  const Tensor x = randn({2, 3, 4, 5}), y = randn({2, 3, 4, 5}), bias = randn({3, 1, 1});
  const Tensor a = x.clone(), ac = x.contiguous(kCL);
  a.add_(y).mul_(bias).add_(0.25).clamp_(-1.0, 1.0);
  ac.add_(y).mul_(bias).add_(0.25).clamp_(-1.0, 1.0);
  EXPECT_EQ(ac.suggest_memory_format(), kCL);
  EXPECT_EQ(values(ac), values(a));
  ac.copy_(y);
  EXPECT_EQ(values(ac), values(y));
  ac.copy_(bias);  // broadcast into NHWC
  EXPECT_EQ(values(ac), values(zeros({2, 3, 4, 5}) + bias));
  ac.copy_(x.to(DType::BF16).contiguous(kCL));
  EXPECT_EQ(values(ac), values(x.to(DType::BF16)));
}

// A small conv net written with the functional ops: every gradient of the channels_last run
// equals the contiguous run's, in the format of its input.
struct ConvNetResult {
  Tensor loss, grad_x, grad_w1, grad_w2, grad_b2;
};
ConvNetResult conv_net(MemoryFormat format) {
  Generator gen(7);
  Tensor x = randn({4, 3, 8, 8}, gen).contiguous(format == kCL ? kCL : MemoryFormat::Contiguous).requires_grad_();
  Tensor w1 = randn({8, 3, 3, 3}, gen) * 0.3, w2 = randn({8, 8, 1, 1}, gen) * 0.3, b2 = randn({8}, gen);
  if (format == kCL) w1 = w1.contiguous(kCL);
  w1.requires_grad_();
  w2.requires_grad_();
  b2.requires_grad_();
  BatchNormOptions bn;
  bn.training = true;
  const Tensor h = relu(batch_norm(conv2d(x, w1, Tensor(), 1, 1), Tensor(), Tensor(), Tensor(), Tensor(), bn));
  const Tensor r = h + conv2d(h, w2, b2) * 0.5;  // a residual join
  const Tensor loss = (max_pool2d(r, 2).mean({2, 3}) * randn({4, 8}, gen)).sum();
  loss.backward();
  return {loss, x.grad(), w1.grad(), w2.grad(), b2.grad()};
}

TEST(MemoryFormat, GradientsOfAChannelsLastNetEqualTheContiguousNets) {
  const ConvNetResult a = conv_net(MemoryFormat::Contiguous), b = conv_net(kCL);
  EXPECT_EQ(b.grad_x.suggest_memory_format(), kCL);
  EXPECT_EQ(b.grad_w1.suggest_memory_format(), kCL);
  EXPECT_NEAR(b.loss.item(), a.loss.item(), 1e-5);
  for (auto [got, want] : {std::pair{b.grad_x, a.grad_x}, {b.grad_w1, a.grad_w1}, {b.grad_w2, a.grad_w2},
                           {b.grad_b2, a.grad_b2}}) {
    const std::vector<float> g = values(got), w = values(want);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5f * (1.0f + std::fabs(w[i]))) << i;
  }
}

TEST(MemoryFormat, EachBackwardSeesItsOutputsFormat) {
  // x_cl + conv2d(...): the sum is channels_last, the convolution's output is not; its backward
  // gets its gradient in its own (contiguous) format.
  const Tensor x = randn({2, 3, 4, 4}), w = randn({3, 3, 1, 1});
  const Tensor xc = x.contiguous(kCL).requires_grad_(), xr = x.clone().requires_grad_();
  (xc + conv2d(xc, w) * xc).sum().backward();
  (xr + conv2d(xr, w) * xr).sum().backward();
  EXPECT_EQ(xc.grad().suggest_memory_format(), kCL);
  const std::vector<float> got = values(xc.grad()), want = values(xr.grad());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
}

TEST(MemoryFormat, AGradOutputInTheOtherFormatIsConverted) {
  const Tensor x = randn({2, 3, 4, 4}).contiguous(kCL).requires_grad_();
  const Tensor g = randn({2, 3, 4, 4});
  (x * 2.0).backward(g);
  EXPECT_EQ(x.grad().suggest_memory_format(), kCL);
  EXPECT_EQ(values(x.grad()), values(g * 2.0));
}

TEST(MemoryFormat, ModuleToChannelsLastConvertsFourDimensionalTensorsOnly) {
  nn::Conv2d conv(nn::Conv2d::Options{3, 8, 3});
  nn::Linear linear(8, 2);
  const std::vector<float> before = values(conv.weight);
  conv.to(kCL);
  linear.to(kCL);
  EXPECT_EQ(conv.weight.suggest_memory_format(), kCL);
  EXPECT_EQ(conv.bias.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_EQ(linear.weight.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_EQ(values(conv.weight), before);
  EXPECT_EQ(values(conv.state_dict().at("weight")), before);
  // Loading keeps the module's format; saving writes the shape's order.
  StateDict state = conv.state_dict();
  state.at("weight") = zeros({8, 3, 3, 3}) + 1.5;
  conv.load_state_dict(state);
  EXPECT_EQ(conv.weight.suggest_memory_format(), kCL);
  EXPECT_EQ(values(conv.weight), std::vector<float>(216, 1.5f));
  const std::string path = testing::TempDir() + "/memory_format.safetensors";
  const Tensor w = iota({8, 3, 3, 3}).contiguous(kCL);
  save_safetensors(path, {{"w", w}});
  EXPECT_EQ(values(load_safetensors(path).at("w")), values(iota({8, 3, 3, 3})));
  std::remove(path.c_str());
  conv.to(MemoryFormat::Contiguous);
  EXPECT_TRUE(conv.weight.is_contiguous());
}

// Three optimizer steps on channels_last parameters end on the contiguous run's values, the
// parameters and their state staying channels_last.
template <typename MakeOptimizer>
std::vector<float> train_three_steps(MemoryFormat format, MakeOptimizer make) {
  Tensor w = (iota({4, 3, 2, 2}) * 0.01).contiguous(format == kCL ? kCL : MemoryFormat::Contiguous).requires_grad_();
  auto opt = make(std::vector<Tensor>{w});
  const Tensor target = iota({4, 3, 2, 2}) * 0.02 - 0.5;
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    ((w - target) * (w - target)).sum().backward();
    opt.step();
  }
  EXPECT_EQ(w.suggest_memory_format(), format);
  return values(w);
}

TEST(MemoryFormat, OptimizersStepChannelsLastParameters) {
  auto sgd = [](std::vector<Tensor> p) { return optim::SGD(p, optim::SGD::Options{0.1, 0.9}); };
  auto adamw = [](std::vector<Tensor> p) { return optim::AdamW(p, optim::AdamW::Options{0.01}); };
  EXPECT_EQ(train_three_steps(kCL, sgd), train_three_steps(MemoryFormat::Contiguous, sgd));
  EXPECT_EQ(train_three_steps(kCL, adamw), train_three_steps(MemoryFormat::Contiguous, adamw));
}

TEST(MemoryFormat, StateMadeBeforeModuleToFollowsTheParameter) {
  // Two SGD steps with momentum; between them one of two identical convolutions goes channels_last
  // (its momentum buffers, made contiguous by the first step, follow it).
  Generator g1(3), g2(3);
  nn::Conv2d conv(nn::Conv2d::Options{2, 4, 3}, g1), twin(nn::Conv2d::Options{2, 4, 3}, g2);
  optim::SGD opt(conv.parameters(), optim::SGD::Options{0.1, 0.9});
  optim::SGD twin_opt(twin.parameters(), optim::SGD::Options{0.1, 0.9});
  const Tensor x = randn({2, 2, 5, 5});
  auto step = [&x](nn::Conv2d& m, optim::SGD& o) {
    o.zero_grad();
    m.forward(x).pow(2.0).sum().backward();
    o.step();
  };
  step(conv, opt);
  step(twin, twin_opt);
  conv.to(kCL);
  step(conv, opt);
  step(twin, twin_opt);
  EXPECT_EQ(conv.weight.suggest_memory_format(), kCL);
  const std::vector<float> got = values(conv.weight), want = values(twin.weight);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
}

}  // namespace
}  // namespace demi

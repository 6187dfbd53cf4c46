// demi::dropout: torch's semantics (zero with probability p, scale the rest by 1 / (1 - p); the
// input itself for p = 0, in eval and when empty; p outside [0, 1] refused), the mask from the
// generator passed or the default of the input's device, equal to `random`'s float32 uniforms
// below 1 - p, and a backward that draws the forward's mask again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

TEST(Dropout, IsTheInputItselfForPZeroEvalAndEmpty) {
  Generator gen(1);
  const Tensor x = randn({4, 5}, gen);
  const GeneratorState before = default_generator().state();
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  const Tensor empty_x = zeros({0, 3});
  EXPECT_TRUE(dropout(empty_x, 0.5, true).is_same(empty_x));
  EXPECT_EQ(default_generator().state(), before);  // nothing drawn by these
}

TEST(Dropout, MaskIsTheFloat32UniformBelowOneMinusP) {
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator data(2);
    const Tensor x = randn({37, 29}, data).to(dtype);
    const double p = 0.3;
    Generator gen(77), twin(77);
    gen.advance(11), twin.advance(11);
    const std::vector<float> u = rand({37, 29}, twin).to_vector<float>();
    const Tensor y = dropout(x, p, true, gen);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(gen.state(), twin.state());  // advanced by numel
    const std::vector<double> vx = x.to_vector<double>(), vy = y.to_vector<double>();
    const float scale = 1.0f / static_cast<float>(1.0 - p);
    for (size_t i = 0; i < vx.size(); ++i) {
      const bool kept = u[i] < 1.0 - p;
      const double want = dtype == DType::F64 ? vx[i] * (kept ? 1.0 / (1.0 - p) : 0.0)
                                              : tensor({static_cast<float>(vx[i]) * (kept ? scale : 0.0f)}, {1})
                                                    .to(dtype).item();
      ASSERT_EQ(vy[i], want) << "element " << i;
    }
  }
}

TEST(Dropout, DrawsFromTheDefaultGeneratorOfTheInputsDevice) {
  manual_seed(5);
  const Tensor x = ones({1000});
  const Tensor a = dropout(x, 0.5);
  EXPECT_EQ(default_generator().offset(), 1000u);
  const Tensor b = dropout(x, 0.5);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());  // a fresh mask each call
  Generator same(5);
  EXPECT_EQ(dropout(x, 0.5, true, same).to_vector<float>(), a.to_vector<float>());
  manual_seed(0);
}

TEST(Dropout, ARestoredGeneratorStateGivesTheSameMask) {
  Generator gen(8);
  const Tensor x = randn({64, 16}, gen);
  const GeneratorState saved = gen.state();
  const std::vector<float> first = dropout(x, 0.25, true, gen).to_vector<float>();
  gen.set_state(saved);
  EXPECT_EQ(dropout(x, 0.25, true, gen).to_vector<float>(), first);
}

TEST(Dropout, KeepsAboutOneMinusPOfTheElements) {
  Generator gen(2024);
  const int64_t n = 100000;
  const double p = 0.3;
  const Tensor y = dropout(ones({n}), p, true, gen);
  const double kept = sum(y != 0.0).item() / static_cast<double>(n);
  EXPECT_NEAR(kept, 1.0 - p, 5 * std::sqrt(p * (1.0 - p) / static_cast<double>(n)));
  // Kept elements are 1 / (1 - p): the expectation is kept.
  EXPECT_NEAR(mean(y).item(), 1.0, 5 * std::sqrt(p / (1.0 - p) / static_cast<double>(n)));
}

TEST(Dropout, GradientIsTheForwardsMaskScaled) {
  Generator gen(3);
  const Tensor x = (rand({50, 20}, gen) + 0.5).requires_grad_();  // nonzero: y == 0 marks a dropped element
  const Tensor y = dropout(x, 0.4, true, gen);
  const Tensor gy = randn({50, 20}, gen);
  y.backward(gy);
  const std::vector<float> vy = y.to_vector<float>(), vg = gy.to_vector<float>(), gx = x.grad().to_vector<float>();
  const float scale = 1.0f / 0.6f;
  for (size_t i = 0; i < vy.size(); ++i) EXPECT_EQ(gx[i], vy[i] != 0.0f ? vg[i] * scale : 0.0f) << "element " << i;
}

TEST(Dropout, POfOneZeroesEverythingAndItsGradient) {
  Generator gen(4);
  const Tensor x = randn({3, 4}, gen).requires_grad_();
  const Tensor y = dropout(x, 1.0, true, gen);
  for (float v : y.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  sum(y).backward();
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Dropout, RefusesPOutsideZeroOneAndIntegerInputs) {
  const Tensor x = ones({3});
  EXPECT_THAT(error_of([&] { dropout(x, 1.5); }), HasSubstr("dropout: p is the probability of zeroing an element and "
                                                            "must be in [0, 1], got p = 1.5"));
  EXPECT_THAT(error_of([&] { dropout(x, -0.1, false); }), HasSubstr("got p = -0.1"));  // in eval too, as PyTorch
  EXPECT_THAT(error_of([&] { dropout(x, std::nan("")); }), HasSubstr("got p = nan"));
  EXPECT_THAT(error_of([&] { dropout(tensor(std::vector<int64_t>{1, 2}, {2}), 0.5); }),
              HasSubstr("dropout: input must be a floating tensor"));
}

TEST(Dropout, AutocastLeavesItsDtype) {
  Generator gen(6);
  const Tensor x = randn({4, 4}, gen), h = x.to(DType::BF16);
  amp::AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  EXPECT_EQ(dropout(x, 0.5, true, gen).dtype(), DType::F32);
  EXPECT_EQ(dropout(h, 0.5, true, gen).dtype(), DType::BF16);
}

TEST(Dropout, IsInNnFunctional) {
  namespace F = nn::functional;
  Generator a(9), b(9);
  const Tensor x = ones({10});
  EXPECT_EQ(F::dropout(x, 0.5, true, a).to_vector<float>(), dropout(x, 0.5, true, b).to_vector<float>());
}

}  // namespace
}  // namespace demi

// nn::LayerNorm: PyTorch's state_dict names and initial values, the elementwise_affine and bias
// options, forward as demi::layer_norm, parameters kept fp32 by to(half) (as BatchNorm2d's), and the
// option errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  return names;
}

TEST(LayerNormModule, ParametersAreNamedAndInitialisedAsInPyTorch) {
  nn::LayerNorm ln(8);
  EXPECT_EQ(keys(ln), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln.weight.shape(), (Shape{8}));
  EXPECT_EQ(ln.weight.to_vector<float>(), std::vector<float>(8, 1.0f));
  EXPECT_EQ(ln.bias.to_vector<float>(), std::vector<float>(8, 0.0f));
  EXPECT_TRUE(ln.weight.requires_grad());
  EXPECT_EQ(ln.options().eps, 1e-5);
  nn::LayerNorm two({4, 5});
  EXPECT_EQ(two.weight.shape(), (Shape{4, 5}));
  EXPECT_EQ(two.bias.shape(), (Shape{4, 5}));
}

TEST(LayerNormModule, WithoutAffineOrWithoutBias) {
  nn::LayerNorm plain(nn::LayerNorm::Options{{6}, 1e-5, false});
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_FALSE(plain.weight.defined());
  nn::LayerNorm no_bias(nn::LayerNorm::Options{{6}, 1e-5, true, false});
  EXPECT_EQ(keys(no_bias), (std::vector<std::string>{"weight"}));
  const Tensor x = randn({3, 6});
  EXPECT_EQ(plain(x).to_vector<float>(), layer_norm(x, {6}).to_vector<float>());
  EXPECT_EQ(no_bias(x).to_vector<float>(), layer_norm(x, {6}, no_bias.weight).to_vector<float>());
}

TEST(LayerNormModule, ForwardIsTheFunctionalWithItsParametersAndEps) {
  Generator gen(1);
  nn::LayerNorm ln(nn::LayerNorm::Options{{3, 4}, 1e-3});
  {
    NoGradGuard no_grad;
    ln.weight.copy_(randn({3, 4}, gen));
    ln.bias.copy_(randn({3, 4}, gen));
  }
  const Tensor x = randn({2, 3, 4}, gen);
  EXPECT_EQ(ln(x).to_vector<float>(), layer_norm(x, {3, 4}, ln.weight, ln.bias, 1e-3).to_vector<float>());
  ln(x).sum().backward();
  EXPECT_EQ(ln.weight.grad().shape(), (Shape{3, 4}));
  EXPECT_EQ(ln.bias.grad().to_vector<float>(), std::vector<float>(12, 2.0f));  // two rows of ones
}

// As BatchNorm2d: a half model keeps fp32 LayerNorm parameters, a half input gives a half output
// and the parameters' gradients are fp32; float64 converts them.
TEST(LayerNormModule, ToHalfKeepsTheParametersFp32) {
  nn::LayerNorm ln(8);
  for (DType half : {DType::BF16, DType::F16}) {
    ln.to(half);
    EXPECT_EQ(ln.weight.dtype(), DType::F32);
    EXPECT_EQ(ln.bias.dtype(), DType::F32);
    const Tensor y = ln(randn({2, 8}).to(half));
    EXPECT_EQ(y.dtype(), half);
    y.sum().backward();
    EXPECT_EQ(ln.weight.grad().dtype(), DType::F32);
  }
  ln.to(DType::F64);
  EXPECT_EQ(ln.weight.dtype(), DType::F64);
  EXPECT_EQ(ln(randn({2, 8}, DType::F64)).dtype(), DType::F64);
  // inside a Sequential too
  nn::Sequential seq;
  seq.emplace<nn::Linear>(8, 8).emplace<nn::LayerNorm>(8);
  seq.to(DType::BF16);
  const auto params = seq.named_parameters();
  EXPECT_EQ(params[0].second.dtype(), DType::BF16);  // 0.weight
  EXPECT_EQ(params[2].second.dtype(), DType::F32);   // 1.weight
  EXPECT_EQ(seq(randn({2, 8}).to(DType::BF16)).dtype(), DType::BF16);
}

TEST(LayerNormModule, RefusesAnEmptyOrNegativeShape) {
  EXPECT_THAT(error_of([] { nn::LayerNorm ln(Shape{}); }),
              HasSubstr("normalized_shape must have at least one dimension"));
  EXPECT_THAT(error_of([] { nn::LayerNorm ln(Shape{4, -1}); }), HasSubstr("has a negative dimension"));
}

}  // namespace
}  // namespace demi

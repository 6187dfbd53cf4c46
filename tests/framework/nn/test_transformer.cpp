// nn::TransformerEncoderLayer and nn::TransformerEncoder: torch's state_dict names, the forward of
// both norm_first values against the layer written out (layer_norm, linear, the activation and the
// attention module), where dropout applies, the masks passed through, the gradients against finite
// differences in float64, and checkpointed encoder layers taking the plain gradients bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"
#include "support/module_gradcheck.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

constexpr int64_t kD = 8, kHeads = 2, kFf = 12;

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  return names;
}

std::vector<std::string> layer_keys(const std::string& prefix, bool bias = true) {
  std::vector<std::string> k = {prefix + "self_attn.in_proj_weight"};
  if (bias) k.push_back(prefix + "self_attn.in_proj_bias");
  k.push_back(prefix + "self_attn.out_proj.weight");
  for (const char* m : {"self_attn.out_proj.", "linear1.", "linear2.", "norm1.", "norm2."}) {
    if (std::string(m) != "self_attn.out_proj.") k.push_back(prefix + m + "weight");
    if (bias) k.push_back(prefix + m + "bias");
  }
  return k;
}

nn::TransformerEncoderLayer::Options options(bool norm_first, nn::TransformerActivation act, bool batch_first,
                                             double dropout = 0.0) {
  nn::TransformerEncoderLayer::Options o;
  o.dim_feedforward = kFf;
  o.dropout = dropout;
  o.activation = act;
  o.layer_norm_eps = 1e-4;
  o.batch_first = batch_first;
  o.norm_first = norm_first;
  return o;
}

// Random values for every parameter (norms and biases start at 1 and 0, which would hide them).
void randomise(nn::Module& m, Generator& gen) {
  NoGradGuard no_grad;
  for (const Tensor& p : m.parameters()) p.copy_(randn(p.shape(), gen) * 0.5);
}

// torch's TransformerEncoderLayer.forward written out, dropout left out.
Tensor reference(nn::TransformerEncoderLayer& layer, const Tensor& src, const Tensor& mask, const Tensor& padding) {
  const auto& o = layer.options();
  const auto children = layer.named_children();
  auto child = [&](size_t i) { return children.at(i).second; };
  auto& l1 = dynamic_cast<nn::Linear&>(*child(1));
  auto& l2 = dynamic_cast<nn::Linear&>(*child(3));
  auto& n1 = dynamic_cast<nn::LayerNorm&>(*child(4));
  auto& n2 = dynamic_cast<nn::LayerNorm&>(*child(5));
  auto norm = [&](nn::LayerNorm& n, const Tensor& x) {
    return layer_norm(x, {kD}, n.weight, n.bias, o.layer_norm_eps);
  };
  auto sa = [&](const Tensor& x) { return layer.self_attn().forward(x, x, x, padding, mask); };
  auto ff = [&](const Tensor& x) {
    const Tensor h = linear(x, l1.weight, l1.bias);
    return linear(o.activation == nn::TransformerActivation::Gelu ? gelu(h) : relu(h), l2.weight, l2.bias);
  };
  if (o.norm_first) {
    const Tensor x = src + sa(norm(n1, src));
    return x + ff(norm(n2, x));
  }
  const Tensor x = norm(n1, src + sa(src));
  return norm(n2, x + ff(x));
}

void expect_near(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << "element " << i;
}

TEST(TransformerEncoderLayer, StateDictNamesAreTorchs) {
  nn::TransformerEncoderLayer layer(kD, kHeads, options(false, nn::TransformerActivation::Relu, false));
  EXPECT_EQ(keys(layer), layer_keys(""));
  std::vector<std::string> children;
  for (const auto& [name, m] : layer.named_children()) children.push_back(name);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                                "dropout1", "dropout2"}));
  auto o = options(true, nn::TransformerActivation::Gelu, true);
  o.bias = false;
  EXPECT_EQ(keys(nn::TransformerEncoderLayer(kD, kHeads, o)), layer_keys("", false));
  const nn::TransformerEncoderLayer::Options torch_defaults;
  EXPECT_EQ(torch_defaults.dim_feedforward, 2048);
  EXPECT_EQ(torch_defaults.dropout, 0.1);
  EXPECT_EQ(torch_defaults.activation, nn::TransformerActivation::Relu);
  EXPECT_FALSE(torch_defaults.batch_first || torch_defaults.norm_first);
}

TEST(TransformerEncoderLayer, ForwardIsTorchsForBothNormOrders) {
  for (const bool norm_first : {false, true}) {
    for (const auto act : {nn::TransformerActivation::Relu, nn::TransformerActivation::Gelu}) {
      for (const bool bf : {false, true}) {
        SCOPED_TRACE(std::string(norm_first ? "pre-norm" : "post-norm") + (bf ? ", batch_first" : ""));
        Generator gen(1);
        nn::TransformerEncoderLayer layer(kD, kHeads, options(norm_first, act, bf), gen);
        layer.to(DType::F64);
        randomise(layer, gen);
        const Tensor x = randn(bf ? Shape{3, 5, kD} : Shape{5, 3, kD}, gen, DType::F64);
        expect_near(layer(x), reference(layer, x, Tensor(), Tensor()));
      }
    }
  }
}

TEST(TransformerEncoderLayer, MasksReachTheAttention) {
  Generator gen(2);
  nn::TransformerEncoderLayer layer(kD, kHeads, options(true, nn::TransformerActivation::Gelu, true), gen);
  layer.to(DType::F64);
  randomise(layer, gen);
  const Tensor x = randn({2, 5, kD}, gen, DType::F64);
  const Tensor padding = tensor({0, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {2, 5}, DType::U8);
  const Tensor mask = randn({5, 5}, gen, DType::F64);
  expect_near(layer.forward(x, mask, padding), reference(layer, x, mask, padding));
  EXPECT_NE(layer.forward(x, mask, padding).to_vector<double>(), layer(x).to_vector<double>());
}

TEST(TransformerEncoderLayer, DropoutActsWhereTorchsDoesAndOnlyInTraining) {
  for (const bool norm_first : {false, true}) {
    Generator gen(3);
    nn::TransformerEncoderLayer layer(kD, kHeads, options(norm_first, nn::TransformerActivation::Relu, true, 1.0), gen);
    randomise(layer, gen);
    const Tensor x = randn({2, 4, kD}, gen);
    // p = 1 zeroes both residual branches (dropout1 after the attention, dropout2 after linear2).
    const Tensor y = layer(x);
    if (norm_first) {
      EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
    } else {
      auto& n1 = dynamic_cast<nn::LayerNorm&>(*layer.named_children()[4].second);
      auto& n2 = dynamic_cast<nn::LayerNorm&>(*layer.named_children()[5].second);
      EXPECT_EQ(y.to_vector<float>(), n2(n1(x)).to_vector<float>());
    }
    layer.eval();
    expect_near(layer(x), reference(layer, x, Tensor(), Tensor()), 1e-5);
  }
}

TEST(TransformerEncoderLayer, GradientsMatchFiniteDifferences) {
  for (const bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm" : "post-norm");
    Generator gen(4);
    nn::TransformerEncoderLayer layer(kD, kHeads, options(norm_first, nn::TransformerActivation::Gelu, false), gen);
    layer.to(DType::F64);
    randomise(layer, gen);
    const Tensor x = randn({3, 2, kD}, gen, DType::F64).requires_grad_();
    const Tensor padding = tensor({0, 0, 1, 0, 0, 0}, {2, 3}, DType::U8);
    std::vector<Tensor> wrt = layer.parameters();
    wrt.push_back(x);
    EXPECT_LE(test::max_gradient_error([&] { return layer.forward(x, Tensor(), padding); }, wrt, gen), 1e-6);
  }
}

TEST(TransformerEncoder, LayersThenTheFinalNormWithTorchsNames) {
  Generator gen(5);
  const auto o = options(true, nn::TransformerActivation::Gelu, true);
  nn::TransformerEncoder encoder(kD, kHeads, o, 3, std::make_shared<nn::LayerNorm>(kD), gen);
  std::vector<std::string> want;
  for (int i = 0; i < 3; ++i) {
    for (const std::string& k : layer_keys("layers." + std::to_string(i) + ".")) want.push_back(k);
  }
  want.insert(want.end(), {"norm.weight", "norm.bias"});
  EXPECT_EQ(keys(encoder), want);
  EXPECT_EQ(keys(nn::TransformerEncoder(kD, kHeads, o, 1)), layer_keys("layers.0."));
  // Each layer initialised on its own.
  EXPECT_NE(encoder.layer(0).self_attn().in_proj_weight.to_vector<float>(),
            encoder.layer(1).self_attn().in_proj_weight.to_vector<float>());

  encoder.to(DType::F64);
  randomise(encoder, gen);
  const Tensor x = randn({2, 5, kD}, gen, DType::F64);
  const Tensor padding = tensor({0, 0, 0, 0, 1, 0, 0, 1, 0, 0}, {2, 5}, DType::U8);
  Tensor plain = x, masked = x;
  for (size_t i = 0; i < 3; ++i) {
    plain = encoder.layer(i)(plain);
    masked = encoder.layer(i).forward(masked, Tensor(), padding);
  }
  expect_near(encoder(x), (*encoder.norm())(plain), 0.0);
  expect_near(encoder.forward(x, Tensor(), padding), (*encoder.norm())(masked), 0.0);
  std::vector<Tensor> wrt = encoder.parameters();
  const Tensor xg = x.clone().requires_grad_();
  wrt.push_back(xg);
  EXPECT_LE(test::max_gradient_error([&] { return encoder.forward(xg, Tensor(), padding); }, wrt, gen), 1e-6);
}

// Gradients of every parameter and of the input after one backward, in fp32.
std::vector<std::vector<float>> gradients(nn::TransformerEncoder& encoder, const Tensor& x, const Tensor& padding) {
  for (const Tensor& p : encoder.parameters()) p.set_grad(Tensor());
  const Tensor in = x.clone().requires_grad_();
  const Tensor y = padding.defined() ? encoder.forward(in, Tensor(), padding) : encoder(in);
  sum(y * y).backward();
  std::vector<std::vector<float>> g = {in.grad().to_vector<float>()};
  for (const Tensor& p : encoder.parameters()) g.push_back(p.grad().to_vector<float>());
  return g;
}

TEST(TransformerEncoder, CheckpointedLayersTakeThePlainGradientsBitForBit) {
  Generator gen(6);
  nn::TransformerEncoder encoder(kD, kHeads, options(true, nn::TransformerActivation::Gelu, true, 0.2), 3,
                                 std::make_shared<nn::LayerNorm>(kD), gen);
  const Tensor x = randn({2, 5, kD}, gen);
  const Tensor padding = tensor({0, 1, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 5}, DType::U8);
  for (const bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "with key padding" : "no masks");
    const Tensor m = masked ? padding : Tensor();
    encoder.layers().checkpoint_blocks({});
    manual_seed(9);  // dropout draws the same masks in both runs
    const auto plain = gradients(encoder, x, m);
    encoder.layers().checkpoint_blocks({0, 1, 2});
    manual_seed(9);
    EXPECT_EQ(gradients(encoder, x, m), plain);
    encoder.layers().checkpoint_blocks({1});
    manual_seed(9);
    EXPECT_EQ(gradients(encoder, x, m), plain);
  }
}

TEST(TransformerEncoder, BadSizesAreRefused) {
  auto o = options(true, nn::TransformerActivation::Gelu, true);
  EXPECT_THAT(error_of([&] { nn::TransformerEncoder(kD, kHeads, o, 0); }), HasSubstr("num_layers must be positive"));
  o.dim_feedforward = 0;
  EXPECT_THAT(error_of([&] { nn::TransformerEncoderLayer(kD, kHeads, o); }), HasSubstr("dim_feedforward"));
  EXPECT_THAT(error_of([] { nn::TransformerEncoderLayer(kD, 3); }), HasSubstr("divisible by num_heads"));
}

}  // namespace
}  // namespace demi

// CCT (models/cct.h): the parameter counts of models/README.md, the PyTorch twin's state_dict names
// (crosscheck/torch_nets.py), the paper's initialisation, the token grid, the forward against the
// net written out (tokenizer, tokens plus positional embedding, encoder, sequence pooling, head) and
// its gradients against finite differences on a tiny CCT in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/models.h"
#include "support/module_gradcheck.h"

namespace demi {
namespace {

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

std::vector<std::string> state_dict_keys(const nn::Module& m) {
  std::vector<std::string> keys;
  for (const auto& [key, t] : m.state_dict()) keys.push_back(key);
  return keys;
}

// The twin's names: positional_emb, the tokenizer's convolutions (every third child), the encoder's
// layers (torch.nn.TransformerEncoderLayer's names) and final norm, the pooling weight, the head.
std::vector<std::string> twin_keys(int conv_layers, int layers) {
  std::vector<std::string> k = {"positional_emb"};
  for (int i = 0; i < conv_layers; ++i) k.push_back("tokenizer." + std::to_string(3 * i) + ".weight");
  for (int i = 0; i < layers; ++i) {
    const std::string l = "encoder.layers." + std::to_string(i) + ".";
    for (const char* name : {"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                             "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                             "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}) {
      k.push_back(l + name);
    }
  }
  for (const char* name : {"encoder.norm.weight", "encoder.norm.bias", "attention_pool.weight", "attention_pool.bias",
                           "fc.weight", "fc.bias"}) {
    k.push_back(name);
  }
  return k;
}

TEST(Cct, ParameterCountsAreTheReadmes) {
  EXPECT_EQ(parameter_count(*models::make_model("cct7")), 3765515);
  EXPECT_EQ(parameter_count(*models::make_model("cct4")), 483659);
}

TEST(Cct, StateDictNamesAreTheTwins) {
  EXPECT_EQ(state_dict_keys(*models::make_model("cct7")), twin_keys(1, 7));
  EXPECT_EQ(state_dict_keys(*models::make_model("cct4")), twin_keys(2, 4));
}

TEST(Cct, TokensAndOutputShapes) {
  Generator gen(0);
  NoGradGuard no_grad;
  const Tensor x = randn({2, 3, 32, 32}, gen);
  for (const auto& [name, tokens, width] : {std::tuple{"cct7", 256, 256}, std::tuple{"cct4", 64, 128}}) {
    auto m = models::make_model(name, gen);
    auto& cct = dynamic_cast<models::Cct&>(*m);
    EXPECT_EQ(cct.positional_emb.shape(), (Shape{1, tokens, width})) << name;
    EXPECT_EQ(cct.tokenizer()(x).flatten(2).size(2), tokens) << name;
    EXPECT_EQ((*m)(x).shape(), (Shape{2, 10})) << name;
  }
}

// The standard deviation of a tensor's elements around 0.
double rms(const Tensor& t) {
  double sq = 0.0;
  for (float v : t.to_vector<float>()) sq += double(v) * v;
  return std::sqrt(sq / static_cast<double>(t.numel()));
}

TEST(Cct, InitialisedAsThePapersCode) {
  Generator gen(1);
  models::Cct cct(models::CctOptions::cct4_3x2(), gen);
  EXPECT_NEAR(rms(cct.positional_emb), 0.2, 0.01);
  EXPECT_NEAR(rms(cct.tokenizer()[0].named_parameters()[0].second), std::sqrt(2.0 / 27.0), 0.03);
  EXPECT_NEAR(rms(cct.tokenizer()[3].named_parameters()[0].second), std::sqrt(2.0 / 576.0), 0.003);
  for (const auto& [name, p] : cct.named_parameters()) {
    SCOPED_TRACE(name);
    const bool norm = name.find("norm") != std::string::npos;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      EXPECT_EQ(rms(p), 0.0);
    } else if (norm) {
      EXPECT_EQ(p.to_vector<float>(), std::vector<float>(static_cast<size_t>(p.numel()), 1.0f));
    } else if (name.find("encoder") != std::string::npos || name.rfind("fc.", 0) == 0) {
      EXPECT_NEAR(rms(p), 0.02, 0.003);  // trunc_normal_(std 0.02): linear and in-projection weights
    }
  }
}

// A CCT small enough for finite differences: 8x8 images, one conv stage (16 tokens), width 8.
models::CctOptions tiny() {
  models::CctOptions o;
  o.num_layers = 2;
  o.embed_dim = 8;
  o.num_heads = 2;
  o.mlp_ratio = 1.5;
  o.image_size = 8;
  return o;
}

TEST(Cct, ForwardIsTheNetWrittenOut) {
  Generator gen(2);
  models::Cct cct(tiny(), gen);
  cct.to(DType::F64);
  const Tensor x = randn({3, 3, 8, 8}, gen, DType::F64);
  const auto children = cct.named_children();
  auto& pool = dynamic_cast<nn::Linear&>(*children[2].second);
  auto& fc = dynamic_cast<nn::Linear&>(*children[3].second);
  const Tensor grid = max_pool2d(relu(conv2d(x, cct.tokenizer()[0].named_parameters()[0].second, Tensor(), 1, 1)), 3,
                                 2, 1);  // [3, 8, 4, 4]
  const Tensor tokens = transpose(grid.reshape({3, 8, 16}), 1, 2) + cct.positional_emb;
  const Tensor encoded = cct.encoder()(tokens);
  Tensor weights = linear(encoded, pool.weight, pool.bias);  // [3, 16, 1]
  weights = softmax(transpose(weights, 1, 2), -1);           // over the tokens
  const Tensor want = linear(matmul(weights, encoded).reshape({3, 8}), fc.weight, fc.bias);
  const std::vector<double> got = cct(x).to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(got.size(), w.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-12 * (1 + std::fabs(w[i])));
}

TEST(Cct, GradientsMatchFiniteDifferences) {
  Generator gen(3);
  models::CctOptions o = tiny();
  o.num_layers = 1;
  models::Cct cct(o, gen);
  cct.to(DType::F64);
  const Tensor x = randn({2, 3, 8, 8}, gen, DType::F64).requires_grad_();
  std::vector<Tensor> wrt = cct.parameters();
  wrt.push_back(x);
  EXPECT_LE(test::max_gradient_error([&] { return cct(x); }, wrt, gen), 1e-6);
}

}  // namespace
}  // namespace demi

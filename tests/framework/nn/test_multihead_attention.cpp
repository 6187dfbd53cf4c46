// nn::MultiheadAttention: torch's state_dict names and initialisation, the forward against the
// attention written out head by head (matmul, softmax) in float64 for both layouts, self- and
// cross-attention and every kind of mask, the gradients against finite differences, autocast, and
// the errors (dropout, shapes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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

constexpr int64_t kE = 8, kH = 2, kN = 2, kL = 5, kS = 7;

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  return names;
}

// A float64 attention with random biases (torch starts them at zero, which would hide their use).
std::unique_ptr<nn::MultiheadAttention> attention(bool batch_first, Generator& gen) {
  nn::MultiheadAttention::Options o;
  o.batch_first = batch_first;
  auto m = std::make_unique<nn::MultiheadAttention>(kE, kH, o, gen);
  m->to(DType::F64);
  NoGradGuard no_grad;
  m->in_proj_bias.copy_(randn({3 * kE}, gen));
  m->out_proj().bias.copy_(randn({kE}, gen));
  return m;
}

// Tokens of `length` in the module's layout.
Tensor tokens(int64_t length, bool batch_first, Generator& gen) {
  return randn(batch_first ? Shape{kN, length, kE} : Shape{length, kN, kE}, gen, DType::F64);
}

// torch's attention written out: per head, softmax(q k^T / sqrt(head_dim) + mask) v, with the
// in-projection's thirds, then out_proj. `mask` is additive over [N, H, L, S] (undefined: none).
Tensor reference(nn::MultiheadAttention& m, const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& mask, bool batch_first) {
  const int64_t d = kE / kH;
  auto batch_major = [&](const Tensor& x) { return batch_first ? x : transpose(x, 0, 1); };  // [N, T, E]
  auto project = [&](const Tensor& x, int64_t i) {
    const Tensor w = m.in_proj_weight.reshape({3, kE, kE}).select(0, i);
    const Tensor b = m.in_proj_bias.reshape({3, kE}).select(0, i);
    const Tensor y = matmul(batch_major(x), transpose(w, 0, 1)) + b;  // [N, T, E]
    return permute(y.reshape({kN, x.size(batch_first ? 1 : 0), kH, d}), {0, 2, 1, 3});
  };
  Tensor scores = matmul(project(query, 0), transpose(project(key, 1), 2, 3)) * (1.0 / std::sqrt(double(d)));
  if (mask.defined()) scores = scores + mask;
  const Tensor heads = matmul(softmax(scores, -1), project(value, 2));  // [N, H, L, d]
  const int64_t L = heads.size(2);
  const Tensor merged = permute(heads, {0, 2, 1, 3}).reshape({kN, L, kE});
  const Tensor out = matmul(merged, transpose(m.out_proj().weight, 0, 1)) + m.out_proj().bias;
  return batch_first ? out : transpose(out, 0, 1);
}

void expect_near(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << "element " << i;
}

// A uint8 mask of `shape` with 1 (blocked) at every index i where i % period == phase.
Tensor blocked_every(const Shape& shape, int period, int phase) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i % period) == phase ? 1.0f : 0.0f;
  return tensor(v, shape, DType::U8);
}

// A uint8 blocked mask as the additive float64 mask the reference adds.
Tensor as_additive(const Tensor& blocked) {
  return masked_fill(zeros(blocked.shape(), DType::F64), blocked, -INFINITY);
}

TEST(MultiheadAttention, StateDictNamesShapesAndTorchsInitialisation) {
  Generator gen(1);
  nn::MultiheadAttention m(64, 4, {}, gen);
  EXPECT_EQ(keys(m), (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m.in_proj_weight.shape(), (Shape{192, 64}));
  EXPECT_EQ(m.in_proj_bias.to_vector<float>(), std::vector<float>(192, 0.0f));
  EXPECT_EQ(m.out_proj().bias.to_vector<float>(), std::vector<float>(64, 0.0f));
  // xavier_uniform_: U(-b, b), b = sqrt(6 / (64 + 192)); its standard deviation is b / sqrt(3).
  const double bound = std::sqrt(6.0 / 256.0);
  const std::vector<float> w = m.in_proj_weight.to_vector<float>();
  double sq = 0.0;
  for (float x : w) {
    EXPECT_LE(std::fabs(x), bound);
    sq += double(x) * x;
  }
  EXPECT_NEAR(std::sqrt(sq / w.size()), bound / std::sqrt(3.0), 0.02 * bound);
  // out_proj.weight: nn.Linear's default, U(-1/sqrt(64), 1/sqrt(64)).
  for (float x : m.out_proj().weight.to_vector<float>()) EXPECT_LE(std::fabs(x), 0.125);

  nn::MultiheadAttention no_bias(64, 4, {0.0, false});
  EXPECT_EQ(keys(no_bias), (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
}

TEST(MultiheadAttention, DropoutOnTheWeightsIsRefusedNamingTheAlternatives) {
  const std::string e = error_of([] { nn::MultiheadAttention(8, 2, {0.1}); });
  EXPECT_THAT(e, HasSubstr("dropout on the attention weights (0.1) is not supported"));
  EXPECT_THAT(e, HasSubstr("dropout = 0"));
  EXPECT_THAT(e, HasSubstr("nn::Dropout on the attention's output"));
  EXPECT_THAT(error_of([] { nn::MultiheadAttention(10, 4); }), HasSubstr("divisible by num_heads"));
}

TEST(MultiheadAttention, SelfAttentionIsTheCompositionInBothLayouts) {
  for (const bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "batch_first" : "sequence first");
    Generator gen(2);
    const auto held = attention(bf, gen);
    nn::MultiheadAttention& m = *held;
    const Tensor x = tokens(kL, bf, gen);
    expect_near(m(x), reference(m, x, x, x, Tensor(), bf));
    expect_near(m.forward(x, x, x), m(x), 0.0);
  }
}

TEST(MultiheadAttention, CrossAttentionProjectsEachInputWithItsThird) {
  for (const bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "batch_first" : "sequence first");
    Generator gen(3);
    const auto held = attention(bf, gen);
    nn::MultiheadAttention& m = *held;
    const Tensor q = tokens(kL, bf, gen), k = tokens(kS, bf, gen), v = tokens(kS, bf, gen);
    const Tensor y = m.forward(q, k, v);
    EXPECT_EQ(y.shape(), q.shape());
    expect_near(y, reference(m, q, k, v, Tensor(), bf));
  }
}

TEST(MultiheadAttention, MasksMeanWhatTorchsMean) {
  Generator gen(4);
  const auto held = attention(true, gen);
  nn::MultiheadAttention& m = *held;
  const Tensor q = tokens(kL, true, gen), k = tokens(kS, true, gen), v = tokens(kS, true, gen);
  const Tensor padding = blocked_every({kN, kS}, 3, 1);           // 1: ignore that key
  const Tensor attn2 = blocked_every({kL, kS}, 4, 2);             // 1: that query may not see that key
  const Tensor attn3 = blocked_every({kN * kH, kL, kS}, 5, 0);
  const Tensor float_attn = randn({kL, kS}, gen, DType::F64);
  const Tensor padding_4d = as_additive(padding).reshape({kN, 1, 1, kS});
  struct Case {
    const char* name;
    Tensor padding, attn, additive;
  };
  const Case cases[] = {
      {"key_padding_mask", padding, Tensor(), padding_4d},
      {"attn_mask [L, S]", Tensor(), attn2, as_additive(attn2)},
      {"attn_mask [N * H, L, S]", Tensor(), attn3, as_additive(attn3).reshape({kN, kH, kL, kS})},
      {"both uint8", padding, attn2, as_additive(attn2) + padding_4d},
      {"floating attn_mask", Tensor(), float_attn, float_attn},
      {"floating attn_mask and uint8 padding", padding, float_attn, float_attn + padding_4d},
      {"floating key_padding_mask", as_additive(padding), attn3,
       as_additive(attn3).reshape({kN, kH, kL, kS}) + padding_4d},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_near(m.forward(q, k, v, c.padding, c.attn), reference(m, q, k, v, c.additive, true));
  }
}

TEST(MultiheadAttention, IsCausalAloneWithAMaskOrWithKeyPadding) {
  Generator gen(5);
  const auto held = attention(false, gen);
  nn::MultiheadAttention& m = *held;
  const Tensor x = tokens(kL, false, gen);
  std::vector<float> upper(kL * kL);
  for (int64_t i = 0; i < kL; ++i) {
    for (int64_t j = 0; j < kL; ++j) upper[static_cast<size_t>(i * kL + j)] = j > i ? 1.0f : 0.0f;
  }
  const Tensor causal = tensor(upper, {kL, kL}, DType::U8);
  const Tensor want = reference(m, x, x, x, as_additive(causal), false);
  expect_near(m.forward(x, x, x, Tensor(), Tensor(), true), want);
  expect_near(m.forward(x, x, x, Tensor(), causal, true), want);  // torch's hint: the mask applies
  const Tensor padding = blocked_every({kN, kL}, kL, kL - 1);    // the last key of each sequence
  expect_near(m.forward(x, x, x, padding, Tensor(), true),
              reference(m, x, x, x, as_additive(causal) + as_additive(padding).reshape({kN, 1, 1, kL}), false));
}

TEST(MultiheadAttention, GradientsMatchFiniteDifferences) {
  Generator gen(6);
  for (const bool bf : {false, true}) {
    SCOPED_TRACE(bf ? "batch_first" : "sequence first");
    const auto held = attention(bf, gen);
    nn::MultiheadAttention& m = *held;
    const Tensor x = tokens(3, bf, gen).requires_grad_();
    const Tensor k = tokens(4, bf, gen).requires_grad_(), v = tokens(4, bf, gen).requires_grad_();
    const Tensor padding = blocked_every({kN, 4}, 4, 3);
    std::vector<Tensor> wrt = m.parameters();
    wrt.push_back(x);
    EXPECT_LE(test::max_gradient_error([&] { return m(x); }, wrt, gen), 1e-6) << "self-attention";
    wrt.push_back(k);
    wrt.push_back(v);
    EXPECT_LE(test::max_gradient_error([&] { return m.forward(x, k, v, padding); }, wrt, gen), 1e-6)
        << "cross-attention with key padding";
  }
  const auto held = attention(true, gen);
  nn::MultiheadAttention& m = *held;
  const Tensor x = tokens(3, true, gen).requires_grad_();
  const Tensor mask = randn({3, 3}, gen, DType::F64).requires_grad_();  // a floating mask gets a gradient
  EXPECT_LE(test::max_gradient_error([&] { return m.forward(x, x, x, Tensor(), mask); }, {x, mask}, gen), 1e-6);
}

TEST(MultiheadAttention, AutocastRunsTheProjectionsAndHeadsInTheHalfType) {
  Generator gen(7);
  nn::MultiheadAttention m(64, 4, {0.0, true, true}, gen);
  const Tensor x = randn({2, 16, 64}, gen);
  const Tensor fp32 = m(x);
  for (const DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(half));
    amp::AutocastGuard guard(Device::Kind::CPU, half);
    const Tensor y = m(x);
    EXPECT_EQ(y.dtype(), half);
    const std::vector<float> got = y.to_vector<float>(), want = fp32.to_vector<float>();
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, double(std::fabs(got[i] - want[i])));
      ref = std::max(ref, double(std::fabs(want[i])));
    }
    EXPECT_LE(err, (half == DType::BF16 ? 0.03 : 0.005) * ref);
  }
}

TEST(MultiheadAttention, ShapeErrorsNameTheExpectedLayout) {
  nn::MultiheadAttention m(8, 2);
  EXPECT_THAT(error_of([&] { m(randn({5, 2, 6})); }), HasSubstr("[length, batch, embed_dim] with embed_dim 8"));
  EXPECT_THAT(error_of([&] { m(randn({5, 8})); }), HasSubstr("unbatched inputs"));
  const Tensor x = randn({5, 2, 8});
  EXPECT_THAT(error_of([&] { m.forward(x, x, x, zeros({2, 4}, DType::U8)); }),
              HasSubstr("key_padding_mask must be [batch, keys] = [2, 5]"));
  EXPECT_THAT(error_of([&] { m.forward(x, x, x, Tensor(), zeros({3, 5, 5}, DType::U8)); }),
              HasSubstr("or [batch * num_heads, L, S] = [4, 5, 5]"));
  EXPECT_THAT(error_of([&] { m.forward(x, randn({6, 2, 8}), randn({5, 2, 8})); }), HasSubstr("must have one shape"));
}

}  // namespace
}  // namespace demi

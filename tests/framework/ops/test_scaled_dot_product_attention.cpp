// scaled_dot_product_attention as users meet it: the classic fp16 failure (logits past 65504) that it
// avoids, alone and under fp16 autocast; is_causal and bool masks meaning what the equivalent additive
// masks mean, bit for bit; and its argument errors. Gradients: test_gradcheck.cpp; the kernels:
// tests/backends/cpu/test_attention.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/amp/autocast.h"
#include "framework/demi/demi.h"
#include "support/error_of.h"
#include "support/tolerance.h"

namespace demi {
namespace {

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>()) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// q = k = 300 in every element, E = 1, scale 1: every logit is 90000, past fp16's largest 65504.
// Rounded to fp16 the logits are inf and their softmax NaN; scaled_dot_product_attention never
// stores them in fp16, and gives the values' mean (all logits equal), as in fp32.
TEST(ScaledDotProductAttention, Fp16LogitsPast65504StayFinite) {
  Generator gen(3);
  const Tensor q32 = full({2, 4, 1}, 300.0), k32 = full({2, 6, 1}, 300.0), v32 = randn({2, 6, 3}, gen);
  const Tensor q = q32.to(DType::F16), k = k32.to(DType::F16), v = v32.to(DType::F16);

  const Tensor logits = matmul(q, transpose(k, 1, 2));  // the unfused way, fp16 logits
  EXPECT_TRUE(std::isinf(logits.to_vector<double>()[0])) << "the logits should overflow fp16";
  EXPECT_FALSE(all_finite(softmax(logits))) << "softmax of inf logits should be NaN";

  const Tensor want = scaled_dot_product_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), Tensor(),
                                                   false, 1.0);
  const Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), false, 1.0);
  ASSERT_EQ(out.dtype(), DType::F16);
  EXPECT_TRUE(all_finite(out));
  test::expect_close(out.to_vector<double>(), want.to_vector<double>(), test::rounded(DType::F16), "fp16");

  amp::AutocastGuard autocast(Device::Kind::CPU, DType::F16);
  const Tensor cast_out = scaled_dot_product_attention(q32, k32, v.to(DType::F32), Tensor(), false, 1.0);
  ASSERT_EQ(cast_out.dtype(), DType::F16);
  EXPECT_TRUE(all_finite(cast_out));
  test::expect_close(cast_out.to_vector<double>(), want.to_vector<double>(), test::rounded(DType::F16), "autocast");
}

// The same through backward: the gradients of fp16 inputs stay finite too.
TEST(ScaledDotProductAttention, Fp16GradientsPast65504StayFinite) {
  Generator gen(4);
  Tensor q = full({1, 3, 1}, 300.0, DType::F16).requires_grad_();
  Tensor k = full({1, 5, 1}, 300.0, DType::F16).requires_grad_();
  Tensor v = randn({1, 5, 2}, gen).to(DType::F16).requires_grad_();
  sum(scaled_dot_product_attention(q, k, v, Tensor(), false, 1.0).to(DType::F32)).backward();
  EXPECT_TRUE(all_finite(q.grad()) && all_finite(k.grad()) && all_finite(v.grad()));
  // every probability is 1/5: grad_v is 3/5 in every element
  test::expect_close(v.grad().to_vector<double>(), std::vector<double>(10, 0.6), test::rounded(DType::F16), "grad_v");
}

// The output and the gradients of q, k and v for one mask (a loss with fixed random weights).
std::vector<std::vector<double>> run(const std::vector<Tensor>& qkv, const Tensor& mask, bool causal) {
  std::vector<Tensor> in;
  for (const Tensor& t : qkv) in.push_back(t.detach().requires_grad_());
  const Tensor out = scaled_dot_product_attention(in[0], in[1], in[2], mask, causal);
  Generator gen(9);
  sum(out * randn(out.shape(), gen)).backward();
  return {out.to_vector<double>(), in[0].grad().to_vector<double>(), in[1].grad().to_vector<double>(),
          in[2].grad().to_vector<double>()};
}

void expect_same_run(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                     int64_t S, const std::string& what) {
  const char* names[] = {"out", "grad_q", "grad_k", "grad_v"};
  for (size_t i = 0; i < 4; ++i) test::expect_close(got[i], want[i], test::accumulated(DType::F32, S), what + names[i]);
}

// is_causal is the lower-triangular bool mask (upper-left aligned, L != S), and a bool mask the
// additive mask of 0 and -inf: the kernels turn all three into the same -inf terms. (Not bit for bit:
// a causal pass skips the key blocks past the diagonal, so some sums run over fewer zeros.)
TEST(ScaledDotProductAttention, CausalAndBoolMasksAreTheirAdditiveMasks) {
  Generator gen(5);
  for (const auto& [L, S] : {std::pair<int64_t, int64_t>{70, 150}, {150, 70}}) {
    SCOPED_TRACE("L=" + std::to_string(L) + " S=" + std::to_string(S));
    const std::vector<Tensor> qkv = {randn({2, 3, L, 8}, gen), randn({2, 3, S, 8}, gen), randn({2, 3, S, 5}, gen)};
    std::vector<float> keep(static_cast<size_t>(L * S)), add(keep.size());
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j < S; ++j) {
        keep[i * S + j] = j <= i ? 1.0f : 0.0f;
        add[i * S + j] = j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
      }
    }
    const auto additive = run(qkv, tensor(add, {L, S}), false);
    expect_same_run(run(qkv, Tensor(), true), additive, S, "is_causal: ");
    expect_same_run(run(qkv, tensor(keep, {L, S}, DType::U8), false), additive, S, "bool mask: ");
  }
}

TEST(ScaledDotProductAttention, BoolMaskStaysUint8UnderAutocast) {
  amp::AutocastGuard autocast(Device::Kind::CPU, DType::BF16);
  const Tensor x = randn({2, 4, 8}), keep = tensor({1, 0, 1, 1}, {4}, DType::U8);
  const Tensor out = scaled_dot_product_attention(x, x, x, keep);
  EXPECT_EQ(out.dtype(), DType::BF16);
  EXPECT_EQ(keep.dtype(), DType::U8);
}

// The message of what `call` throws contains `text`.
#define EXPECT_THAT_ERROR(call, text) \
  EXPECT_THAT(test::error_of([&] { (void)(call); }), ::testing::HasSubstr(text))

TEST(ScaledDotProductAttention, ErrorsNameTheShapesAndTheFix) {
  const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 6});
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, randn({2, 5, 3}), v), "embedding size E");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, k, randn({2, 4, 6})), "positions S");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, randn({3, 5, 4}), v), "leading (batch, head) dims");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(randn({3, 4}), randn({5, 4}), randn({5, 6})), "[1, L, E]");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, k, v, zeros({3, 4})), "does not broadcast");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, k, v, zeros({3, 5}), true), "is_causal");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, k, v, zeros({3, 5}, DType::I64)), "uint8");
  EXPECT_THAT_ERROR(scaled_dot_product_attention(q, k.to(DType::BF16), v), "convert them");
}

}  // namespace
}  // namespace demi

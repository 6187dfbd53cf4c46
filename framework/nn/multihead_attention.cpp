// nn::MultiheadAttention: the in-projection (three linears on the rows of in_proj_weight), the
// heads split by a reshape and one permute, torch's masks merged into
// the one mask scaled_dot_product_attention takes, all heads in one call, then out_proj.
#include "framework/nn/multihead_attention.h"

#include <cmath>
#include <vector>

#include "framework/amp/autocast_apply.h"
#include "framework/autograd/grad_mode.h"
#include "framework/nn/init.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::nn {
namespace {

int64_t checked_embed_dim(int64_t embed_dim, int64_t num_heads, const MultiheadAttention::Options& o) {
  DEMI_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "nn::MultiheadAttention: embed_dim (",
             embed_dim, ") must be positive and divisible by num_heads (", num_heads, ")");
  DEMI_CHECK(o.dropout == 0.0, "nn::MultiheadAttention: dropout on the attention weights (", o.dropout,
             ") is not supported: the heads run through the fused scaled_dot_product_attention, which never forms "
             "the weights. Pass dropout = 0 and put nn::Dropout on the attention's output instead (as "
             "TransformerEncoderLayer's dropout1 does), or compute softmax(q k^T / sqrt(head_dim)) with matmul, "
             "softmax and dropout yourself");
  return embed_dim;
}

// A uint8 mask of `shape` with 1 above the diagonal: query i may not see key j > i.
Tensor causal_blocked(int64_t L, int64_t S, const Device& device) {
  std::vector<float> v(static_cast<size_t>(L * S));
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < S; ++j) v[static_cast<size_t>(i * S + j)] = j > i ? 1.0f : 0.0f;
  }
  return tensor(v, {L, S}, DType::U8, device);
}

// A torch mask as an additive one: uint8 1 (blocked) -> -inf, 0 -> 0; a floating mask as it is.
Tensor additive(const Tensor& mask) {
  if (is_floating(mask.dtype())) return mask;
  return masked_fill(zeros(mask.shape(), DType::F32, mask.device()), mask, -INFINITY);
}

// key_padding_mask [N, S] and attn_mask [L, S] or [N * H, L, S] (torch's meaning: uint8 1 blocks)
// as the one mask scaled_dot_product_attention takes over [N, H, L, S]: uint8 1 where the key takes
// part when both are uint8, else their sum as additive masks (F.multi_head_attention_forward's merge).
Tensor merged_mask(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t N, int64_t H, int64_t L,
                   int64_t S) {
  const char* op = "nn::MultiheadAttention";
  Tensor padding, attn;
  if (key_padding_mask.defined()) {
    DEMI_CHECK(key_padding_mask.shape() == (Shape{N, S}), op, ": key_padding_mask must be [batch, keys] = ",
               Shape{N, S}, ", got ", key_padding_mask.shape());
    padding = key_padding_mask.reshape({N, 1, 1, S});
  }
  if (attn_mask.defined()) {
    const bool two = attn_mask.shape() == Shape{L, S}, three = attn_mask.shape() == Shape{N * H, L, S};
    DEMI_CHECK(two || three, op, ": attn_mask must be [L, S] = ", Shape{L, S}, " or [batch * num_heads, L, S] = ",
               Shape{N * H, L, S}, ", got ", attn_mask.shape());
    attn = three ? attn_mask.reshape({N, H, L, S}) : attn_mask;
  }
  for (const Tensor& m : {padding, attn}) {
    DEMI_CHECK(!m.defined() || m.dtype() == DType::U8 || is_floating(m.dtype()), op, ": masks must be uint8 (1: "
               "blocked, as torch's True) or floating (added to the scores), got ", m.dtype());
  }
  if (!padding.defined() && !attn.defined()) return Tensor();
  auto is_uint8 = [](const Tensor& m) { return !m.defined() || m.dtype() == DType::U8; };
  if (is_uint8(padding) && is_uint8(attn)) {
    if (!padding.defined()) return eq(attn, 0.0);
    if (!attn.defined()) return eq(padding, 0.0);
    return masked_fill(eq(attn, 0.0), padding, 0.0);
  }
  if (!padding.defined()) return additive(attn);
  if (!attn.defined()) return additive(padding);
  return additive(attn) + additive(padding);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, const Options& o, Generator& gen)
    : in_proj_weight(register_parameter("in_proj_weight", empty({3 * checked_embed_dim(embed_dim, num_heads, o),
                                                                 embed_dim}))),
      in_proj_bias(register_parameter("in_proj_bias", o.bias ? zeros({3 * embed_dim}) : Tensor())),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      options_(o),
      out_proj_(register_module("out_proj", std::make_shared<Linear>(Linear::Options{embed_dim, embed_dim, o.bias},
                                                                     gen))) {
  init::xavier_uniform_(in_proj_weight, gen);
  NoGradGuard no_grad;
  if (out_proj_->bias.defined()) out_proj_->bias.zero_();
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x); }

Tensor MultiheadAttention::split_heads(const Tensor& projected) const {
  const int64_t a = projected.size(0), b = projected.size(1), head_dim = embed_dim_ / num_heads_;
  const Tensor heads = projected.reshape({a, b, num_heads_, head_dim});
  return options_.batch_first ? heads.permute({0, 2, 1, 3}) : heads.permute({1, 2, 0, 3});
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask, bool is_causal) {
  const char* op = "nn::MultiheadAttention";
  const bool bf = options_.batch_first;
  const char* layout = bf ? "[batch, length, embed_dim]" : "[length, batch, embed_dim]";
  for (const auto& [t, name] : {std::pair{&query, "query"}, std::pair{&key, "key"}, std::pair{&value, "value"}}) {
    DEMI_CHECK(t->defined() && t->dim() == 3 && t->size(2) == embed_dim_, op, ": ", name, " must be ", layout,
               " with embed_dim ", embed_dim_, ", got ", t->defined() ? t->shape() : Shape{},
               " (unbatched inputs: unsqueeze a batch dim)");
  }
  const int64_t N = query.size(bf ? 0 : 1), L = query.size(bf ? 1 : 0), S = key.size(bf ? 1 : 0);
  DEMI_CHECK(key.shape() == value.shape() && key.size(bf ? 0 : 1) == N, op, ": key ", key.shape(), " and value ",
             value.shape(), " must have one shape, with query's batch ", N);
  const int64_t H = num_heads_;
  // One product per projection, self-attention too: one [3 * E] product split by select would
  // cost its backward three zero-filled gradients of the whole product and two sums of them; the
  // weight's rows split for free, and the three input gradients sum at a third of the size.
  const Tensor w = in_proj_weight.reshape({3, embed_dim_, embed_dim_});
  const Tensor b = in_proj_bias.defined() ? in_proj_bias.reshape({3, embed_dim_}) : Tensor();
  auto project = [&](const Tensor& x, int64_t i) {
    return split_heads(linear(x, w.select(0, i), b.defined() ? b.select(0, i) : Tensor()));
  };
  // Self-attention under autocast: the input cast once, not by each product (three casts, and
  // three saved copies for backward).
  const bool self = query.is_same(key) && key.is_same(value);
  Tensor x = query;
  DType target;
  if (self && amp::detail::any_autocast_enabled() &&
      amp::detail::autocast_target(amp::Category::LowerPrecision, {&query}, &target)) {
    x = amp::detail::autocast_input(query, target);
  }
  const Tensor q = project(x, 0), k = project(self ? x : key, 1), v = project(self ? x : value, 2);
  // is_causal with attn_mask is torch's hint that attn_mask is the causal mask: attn_mask applies.
  const bool causal_alone = is_causal && !attn_mask.defined() && !key_padding_mask.defined();
  const Tensor attn = is_causal && !attn_mask.defined() && key_padding_mask.defined()
                          ? causal_blocked(L, S, query.device())
                          : attn_mask;
  const Tensor mask = merged_mask(key_padding_mask, attn, N, H, L, S);
  const Tensor out = scaled_dot_product_attention(q, k, v, mask, causal_alone);  // [N, H, L, head_dim]
  const Tensor merged = bf ? out.permute({0, 2, 1, 3}).reshape({N, L, embed_dim_})
                           : out.permute({2, 0, 1, 3}).reshape({L, N, embed_dim_});
  return (*out_proj_)(merged);
}

}  // namespace demi::nn

// nn::MultiheadAttention: torch.nn.MultiheadAttention with query, key and value of one size E:
// in_proj_weight [3E, E] (xavier_uniform_) and in_proj_bias [3E] (zeros), out_proj (a Linear(E, E)
// whose bias starts at zero), the heads computed by one scaled_dot_product_attention call.
// Differences from torch (docs/pytorch.md): forward returns the output only (need_weights is not
// supported: the fused kernel never forms the weights), dropout on the attention weights must be 0,
// no kdim / vdim, add_bias_kv or add_zero_attn, and inputs are batched (3-D).
#pragma once

#include <memory>

#include "framework/nn/linear.h"
#include "framework/nn/module.h"
#include "framework/tensor/generator.h"

namespace demi::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;      // on the attention weights: only 0 (the constructor says why)
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // torch's default: [L, N, E]; true: [N, L, E]
};

class MultiheadAttention : public Module {
 public:
  using Options = MultiheadAttentionOptions;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const Options& options = Options(),
                     Generator& gen = default_generator());

  // Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override;
  // query [L, N, E], key and value [S, N, E] ([N, L, E] and [N, S, E] with batch_first) -> [L, N, E].
  // key_padding_mask [N, S]: uint8 (1: ignore that key, as torch's True) or floating (added).
  // attn_mask [L, S] or [N * num_heads, L, S]: uint8 (1: that query may not see that key, as torch's
  // True) or floating (added). is_causal: query i sees keys j <= i; with attn_mask given, torch takes
  // it as a hint that attn_mask is that mask, and demi applies attn_mask.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = Tensor(),
                 const Tensor& attn_mask = Tensor(), bool is_causal = false);

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const Options& options() const { return options_; }
  Tensor& in_proj_weight;
  Tensor& in_proj_bias;
  Linear& out_proj() { return *out_proj_; }

 private:
  // [batch, heads, length, head_dim] from the projected [length, batch, E] or [batch, length, E].
  Tensor split_heads(const Tensor& projected) const;

  int64_t embed_dim_, num_heads_;
  Options options_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace demi::nn

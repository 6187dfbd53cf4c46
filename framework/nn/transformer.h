// nn::TransformerEncoderLayer and nn::TransformerEncoder: torch.nn's, with its state_dict names
// (self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*; layers.N.* and norm.*) and its forward for
// norm_first false (post-norm) and true (pre-norm). Differences from torch (docs/pytorch.md): the
// attention weights get no dropout (MultiheadAttention runs a fused kernel; `dropout` applies where
// torch's dropout, dropout1 and dropout2 do), TransformerEncoder builds each layer with its own
// initialisation (torch deep-copies one layer, so its layers start equal), and there is no nested-
// tensor fast path.
#pragma once

#include <memory>

#include "framework/nn/dropout.h"
#include "framework/nn/layer_norm.h"
#include "framework/nn/linear.h"
#include "framework/nn/multihead_attention.h"
#include "framework/nn/sequential.h"

namespace demi::nn {

enum class TransformerActivation { Relu, Gelu };

struct TransformerEncoderLayerOptions {  // torch.nn.TransformerEncoderLayer's defaults
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  TransformerActivation activation = TransformerActivation::Relu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;  // of the linear layers, the attention and the norms
};

class TransformerEncoderLayer : public Module {
 public:
  using Options = TransformerEncoderLayerOptions;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const Options& options = Options(),
                          Generator& gen = default_generator());

  Tensor forward(const Tensor& src) override;
  // src [L, N, E] ([N, L, E] with batch_first); the masks as MultiheadAttention::forward takes them.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);

  const Options& options() const { return options_; }
  MultiheadAttention& self_attn() { return *self_attn_; }

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask, bool is_causal);
  Tensor feed_forward_block(const Tensor& x);

  Options options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Linear> linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout1_, dropout2_;
};

class TransformerEncoder : public Module {
 public:
  // num_layers layers built from `layer` (each initialised on its own), then `norm` when given.
  TransformerEncoder(int64_t d_model, int64_t nhead, const TransformerEncoderLayer::Options& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr, Generator& gen = default_generator());

  // Through layers() as a Sequential, so that layers().checkpoint_blocks(...) checkpoints them.
  Tensor forward(const Tensor& src) override;
  // Every layer with the masks; checkpointed blocks of layers() stay checkpointed.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);

  Sequential& layers() { return *layers_; }
  TransformerEncoderLayer& layer(size_t i) { return dynamic_cast<TransformerEncoderLayer&>((*layers_)[i]); }
  LayerNorm* norm() { return norm_.get(); }

 private:
  std::shared_ptr<Sequential> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

}  // namespace demi::nn

// CCT, the Compact Convolutional Transformer (Hassani et al., "Escaping the Big Data Paradigm with
// Compact Transformers", arXiv:2104.05704; https://github.com/SHI-Labs/Compact-Transformers): a
// convolutional tokenizer, a learnable positional embedding, a pre-norm GELU transformer encoder
// with a final LayerNorm, sequence pooling and a linear head. make_model builds CCT-7/3x1 as "cct7"
// and CCT-4/3x2 as "cct4". Its PyTorch twin is crosscheck/torch_nets.py's CCT, with the same
// state_dict names.
#pragma once

#include <memory>

#include "framework/demi/demi.h"

namespace demi::models {

struct CctOptions {
  int64_t num_layers = 7;
  int64_t embed_dim = 256;
  int64_t num_heads = 4;
  double mlp_ratio = 2.0;       // dim_feedforward = embed_dim x mlp_ratio
  int conv_layers = 1;          // tokenizer: conv 3x3 (no bias) -> ReLU -> max pool 3, stride 2, padding 1
  int64_t conv_channels = 64;   // the tokenizer's intermediate channels (with conv_layers > 1)
  int64_t num_classes = 10;
  int64_t image_size = 32;

  static CctOptions cct7_3x1();  // 7 layers, width 256, 4 heads, MLP ratio 2, one conv: 3,765,515 parameters
  static CctOptions cct4_3x2();  // 4 layers, width 128, 2 heads, MLP ratio 1, two convs: 483,659 parameters
};

// Images [N, 3, S, S] -> tokens [N, T, D] (T = (S / 2^conv_layers)^2) + positional_emb -> encoder
// (layers of TransformerEncoderLayer, norm_first, GELU, dropout 0; then its final LayerNorm) ->
// sequence pooling (softmax over the tokens of Linear(D, 1), the tokens' weighted sum) -> fc(D, 10).
// Initialised as the paper's code: convolutions kaiming_normal_, linear and in-projection weights
// trunc_normal_(std 0.02) with zero biases, LayerNorms 1 and 0, positional_emb trunc_normal_(std 0.2).
class Cct : public nn::Module {
 public:
  explicit Cct(const CctOptions& options, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  const CctOptions& options() const { return options_; }
  nn::Sequential& tokenizer() { return *tokenizer_; }
  nn::TransformerEncoder& encoder() { return *encoder_; }
  Tensor& positional_emb;  // [1, T, D]

 private:
  void initialise(Generator& gen);

  CctOptions options_;
  std::shared_ptr<nn::Sequential> tokenizer_;
  std::shared_ptr<nn::TransformerEncoder> encoder_;
  std::shared_ptr<nn::Linear> attention_pool_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace demi::models

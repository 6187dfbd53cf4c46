// CCT built from demi::nn: children registered in the order of the PyTorch twin's attributes, so
// that state_dict names and order line up (positional_emb, tokenizer.*, encoder.layers.N.*,
// encoder.norm.*, attention_pool.*, fc.*).
#include "models/cct.h"

namespace demi::models {
namespace {

const CctOptions& checked(const CctOptions& o) {
  DEMI_CHECK(o.num_layers > 0 && o.embed_dim > 0 && o.num_heads > 0 && o.mlp_ratio > 0 && o.conv_layers > 0 &&
                 o.conv_channels > 0 && o.num_classes > 0 && o.image_size > 0,
             "models::Cct: every size must be positive");
  return o;
}

// Tokens per image: each tokenizer stage's pool (3, stride 2, padding 1) halves the grid's side,
// rounding up.
int64_t num_tokens(const CctOptions& o) {
  int64_t side = o.image_size;
  for (int i = 0; i < o.conv_layers; ++i) side = (side - 1) / 2 + 1;
  return side * side;
}

std::shared_ptr<nn::Sequential> make_tokenizer(const CctOptions& o, Generator& gen) {
  auto seq = std::make_shared<nn::Sequential>();
  int64_t in = 3;
  for (int i = 0; i < o.conv_layers; ++i) {
    const int64_t out = i + 1 == o.conv_layers ? o.embed_dim : o.conv_channels;
    seq->emplace<nn::Conv2d>(nn::Conv2d::Options{in, out, 3, 1, 1, false}, gen)
        .emplace<nn::ReLU>()
        .emplace<nn::MaxPool2d>(3, 2, 1);
    in = out;
  }
  return seq;
}

std::shared_ptr<nn::TransformerEncoder> make_encoder(const CctOptions& o, Generator& gen) {
  nn::TransformerEncoderLayer::Options layer;
  layer.dim_feedforward = static_cast<int64_t>(static_cast<double>(o.embed_dim) * o.mlp_ratio);
  layer.dropout = 0.0;
  layer.activation = nn::TransformerActivation::Gelu;
  layer.batch_first = true;
  layer.norm_first = true;
  return std::make_shared<nn::TransformerEncoder>(o.embed_dim, o.num_heads, layer, o.num_layers,
                                                  std::make_shared<nn::LayerNorm>(o.embed_dim), gen);
}

}  // namespace

CctOptions CctOptions::cct7_3x1() { return CctOptions{}; }

CctOptions CctOptions::cct4_3x2() {
  CctOptions o;
  o.num_layers = 4;
  o.embed_dim = 128;
  o.num_heads = 2;
  o.mlp_ratio = 1.0;
  o.conv_layers = 2;
  return o;
}

Cct::Cct(const CctOptions& o, Generator& gen)
    : positional_emb(register_parameter("positional_emb", zeros({1, num_tokens(checked(o)), o.embed_dim}))),
      options_(o),
      tokenizer_(register_module("tokenizer", make_tokenizer(o, gen))),
      encoder_(register_module("encoder", make_encoder(o, gen))),
      attention_pool_(register_module("attention_pool", std::make_shared<nn::Linear>(o.embed_dim, 1, gen))),
      fc_(register_module("fc", std::make_shared<nn::Linear>(o.embed_dim, o.num_classes, gen))) {
  initialise(gen);
}

void Cct::initialise(Generator& gen) {
  NoGradGuard no_grad;
  apply([&gen](nn::Module& m) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) nn::init::kaiming_normal_(conv->weight, gen);
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::trunc_normal_(linear->weight, gen, 0.02);
      if (linear->bias.defined()) linear->bias.zero_();
    }
    if (auto* attention = dynamic_cast<nn::MultiheadAttention*>(&m)) {
      nn::init::trunc_normal_(attention->in_proj_weight, gen, 0.02);
      if (attention->in_proj_bias.defined()) attention->in_proj_bias.zero_();
    }
  });
  nn::init::trunc_normal_(positional_emb, gen, 0.2);
}

Tensor Cct::forward(const Tensor& x) {
  const Tensor grid = (*tokenizer_)(x);  // [N, D, h, w]
  const int64_t n = grid.size(0), d = grid.size(1);
  const Tensor tokens = grid.flatten(2).transpose(1, 2) + positional_emb;  // [N, T, D]
  const Tensor encoded = (*encoder_)(tokens);
  // Sequence pooling: a weight per token, softmax over the tokens, their weighted sum.
  const Tensor weights = softmax((*attention_pool_)(encoded).reshape({n, 1, encoded.size(1)}), -1);
  return (*fc_)(matmul(weights, encoded).reshape({n, d}));
}

}  // namespace demi::models

// nn::TransformerEncoderLayer and nn::TransformerEncoder: torch's forward, children registered in
// torch's order so that state_dict lists them as torch does.
#include "framework/nn/transformer.h"

#include <vector>

#include "framework/autograd/checkpoint.h"
#include "framework/ops/ops.h"

namespace demi::nn {
namespace {

const TransformerEncoderLayer::Options& checked(const TransformerEncoderLayer::Options& o) {
  DEMI_CHECK(o.dim_feedforward > 0, "nn::TransformerEncoderLayer: dim_feedforward must be positive, got ",
             o.dim_feedforward);
  return o;
}

LayerNorm::Options norm_options(int64_t d_model, const TransformerEncoderLayer::Options& o) {
  LayerNorm::Options n{{d_model}};
  n.eps = o.layer_norm_eps;
  n.bias = o.bias;
  return n;
}

MultiheadAttention::Options attention_options(const TransformerEncoderLayer::Options& o) {
  MultiheadAttention::Options a;
  a.bias = o.bias;
  a.batch_first = o.batch_first;
  return a;  // dropout 0: the attention weights get none (transformer.h)
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, const Options& o, Generator& gen)
    : options_(checked(o)),
      self_attn_(register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead,
                                                                                   attention_options(o), gen))),
      linear1_(register_module("linear1", std::make_shared<Linear>(Linear::Options{d_model, o.dim_feedforward, o.bias},
                                                                   gen))),
      dropout_(register_module("dropout", std::make_shared<Dropout>(o.dropout))),
      linear2_(register_module("linear2", std::make_shared<Linear>(Linear::Options{o.dim_feedforward, d_model, o.bias},
                                                                   gen))),
      norm1_(register_module("norm1", std::make_shared<LayerNorm>(norm_options(d_model, o)))),
      norm2_(register_module("norm2", std::make_shared<LayerNorm>(norm_options(d_model, o)))),
      dropout1_(register_module("dropout1", std::make_shared<Dropout>(o.dropout))),
      dropout2_(register_module("dropout2", std::make_shared<Dropout>(o.dropout))) {}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask,
                                                     const Tensor& key_padding_mask, bool is_causal) {
  return (*dropout1_)(self_attn_->forward(x, x, x, key_padding_mask, mask, is_causal));
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  const Tensor h = (*linear1_)(x);
  const Tensor a = options_.activation == TransformerActivation::Gelu ? gelu(h) : relu(h);
  return (*dropout2_)((*linear2_)((*dropout_)(a)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, Tensor()); }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  Tensor x = src;
  if (options_.norm_first) {
    x = x + self_attention_block((*norm1_)(x), src_mask, src_key_padding_mask, is_causal);
    return x + feed_forward_block((*norm2_)(x));
  }
  x = (*norm1_)(x + self_attention_block(x, src_mask, src_key_padding_mask, is_causal));
  return (*norm2_)(x + feed_forward_block(x));
}

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, const TransformerEncoderLayer::Options& layer,
                                       int64_t num_layers, std::shared_ptr<LayerNorm> norm, Generator& gen)
    : layers_(register_module("layers", std::make_shared<Sequential>())) {
  DEMI_CHECK(num_layers > 0, "nn::TransformerEncoder: num_layers must be positive, got ", num_layers);
  for (int64_t i = 0; i < num_layers; ++i) layers_->emplace<TransformerEncoderLayer>(d_model, nhead, layer, gen);
  if (norm) norm_ = register_module("norm", std::move(norm));
}

Tensor TransformerEncoder::forward(const Tensor& src) {
  const Tensor x = (*layers_)(src);
  return norm_ ? (*norm_)(x) : x;
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  auto run = [this, mask, src_key_padding_mask, is_causal](size_t begin, size_t end, const Tensor& in) {
    Tensor x = in;
    for (size_t i = begin; i < end; ++i) x = layer(i).forward(x, mask, src_key_padding_mask, is_causal);
    return x;
  };
  const std::vector<size_t>& starts = layers_->checkpointed_blocks();
  Tensor x = run(0, starts.empty() ? layers_->size() : starts[0], src);
  for (size_t b = 0; b < starts.size(); ++b) {
    const size_t begin = starts[b], end = b + 1 < starts.size() ? starts[b + 1] : layers_->size();
    x = checkpoint([run, begin, end](const Tensor& in) { return run(begin, end, in); }, x);
  }
  return norm_ ? (*norm_)(x) : x;
}

}  // namespace demi::nn

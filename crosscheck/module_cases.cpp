// crosscheck_ops' module cases: nn::MultiheadAttention and nn::TransformerEncoderLayer, forward and
// backward, with torch's masks (key_padding_mask, a uint8 or an additive attn_mask, is_causal). The
// module's parameters are inputs of the case, so that compare.py runs torch's module on the same
// values and their gradients are compared as any input's.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "crosscheck/cases.h"

namespace demi::crosscheck {
namespace {

// The inputs for a module's parameters, in state_dict order, their names appended to names:
// matrices N(0, 1 / fan_in) (the scale of torch's initialisations, so that the attention's logits
// stay near unit size), vectors N(0, 1/4). Parameters that Module::to keeps fp32 beside half ones
// (LayerNorm's) are fp32 inputs.
std::vector<Input> parameter_inputs(nn::Module& m, json& names) {
  m.to(DType::BF16);
  std::vector<Input> in;
  for (const auto& [name, t] : m.named_parameters()) {
    names.push_back(name);
    Input p = scaled(t.shape(), t.dim() == 2 ? 1.0 / std::sqrt(static_cast<double>(t.size(1))) : 0.5);
    p.fp32 = t.dtype() == DType::F32;
    in.push_back(p);
  }
  return in;
}

// A module case's fn: make() builds the module; it takes the inputs' dtype and device, and its
// parameters the values of the last inputs, to which a hook on each parameter hands its gradient
// (where the runner reads it). run(module, inputs) gets the inputs before the parameters. The
// module stays in the case until its next run: the backward after fn returns needs its parameters
// alive (the graph holds leaves weakly).
template <typename M>
Fn module_fn(std::function<std::shared_ptr<M>()> make, std::function<Tensor(M&, const std::vector<Tensor>&)> run) {
  auto held = std::make_shared<std::shared_ptr<M>>();
  return [make, run, held](const std::vector<Tensor>& in) {
    std::shared_ptr<M> m = make();
    const std::vector<std::pair<std::string, Tensor>> params = m->named_parameters();
    const size_t first = in.size() - params.size();
    m->to(in[first].dtype());
    m->to(in[first].device());
    StateDict state;
    for (size_t i = 0; i < params.size(); ++i) state.emplace(params[i].first, in[first + i].detach());
    m->load_state_dict(state);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& to = in[first + i];
      if (to.requires_grad()) {
        params[i].second.register_post_accumulate_grad_hook([to](const Tensor& p) { to.set_grad(p.grad()); });
      }
    }
    *held = m;
    const std::vector<Tensor> data(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(first));
    return std::vector<Tensor>{run(*m, data)};
  };
}

// The masks a case passes, in this order after its data: key_padding_mask [N, S] (uint8, 1: that key
// is ignored); attn_mask "none", "bool" (uint8 [L, S], 1: blocked), "additive" (floating [L, S],
// its gradient compared) or "additive_per_head" ([N * H, L, S]); is_causal (self-attention).
struct Masks {
  bool key_padding = false;
  std::string attn = "none";
  bool causal = false;
};

json mask_params(const Masks& m) {
  return {{"key_padding_mask", m.key_padding}, {"attn_mask", m.attn == "additive_per_head" ? "additive" : m.attn},
          {"is_causal", m.causal}};
}

void append_masks(std::vector<Input>& in, const Masks& m, int64_t N, int64_t H, int64_t L, int64_t S) {
  if (m.key_padding) in.push_back(mask({N, S}));
  if (m.attn == "bool") in.push_back(mask({L, S}));
  if (m.attn == "additive") in.push_back(normal({L, S}));
  if (m.attn == "additive_per_head") in.push_back(normal({N * H, L, S}));
}

// key_padding_mask and attn_mask (undefined where the case has none) from x[i] on.
std::pair<Tensor, Tensor> take_masks(const std::vector<Tensor>& x, size_t i, const Masks& m) {
  const Tensor key_padding = m.key_padding ? x[i++] : Tensor();
  return {key_padding, m.attn != "none" ? x[i] : Tensor()};
}

// Self-attention (one input for query, key and value: the packed in-projection) and cross-attention
// (query of L, key and value of S), both layouts, with and without biases.
void multihead_attention_cases(const CaseList& add) {
  struct Mha {
    std::string name;
    int64_t E, H, N, L, S;
    bool self, batch_first, bias;
    Masks masks;
  };
  const std::vector<Mha> cases = {
      {"mha_self", 16, 2, 2, 9, 9, true, false, true, {}},
      {"mha_self_batch_first_key_padding", 16, 4, 2, 11, 11, true, true, true, {true, "none", false}},
      {"mha_self_additive_mask_key_padding", 16, 2, 2, 10, 10, true, false, true, {true, "additive", false}},
      {"mha_self_causal", 16, 2, 2, 9, 9, true, false, true, {false, "none", true}},
      {"mha_self_batch_first_causal_key_padding", 16, 4, 2, 12, 12, true, true, true, {true, "none", true}},
      {"mha_cross_bool_mask", 24, 4, 2, 7, 13, false, false, true, {false, "bool", false}},
      {"mha_cross_batch_first_bool_mask_key_padding", 16, 2, 2, 9, 12, false, true, true, {true, "bool", false}},
      {"mha_cross_batch_first_additive_mask_per_head", 16, 4, 2, 8, 11, false, true, true,
       {false, "additive_per_head", false}},
      {"mha_cross_no_bias", 16, 2, 2, 7, 10, false, false, false, {}},
  };
  for (const Mha& c : cases) {
    nn::MultiheadAttention::Options o;
    o.batch_first = c.batch_first, o.bias = c.bias;
    std::function<std::shared_ptr<nn::MultiheadAttention>()> make = [c, o] {
      Generator gen(0);
      return std::make_shared<nn::MultiheadAttention>(c.E, c.H, o, gen);
    };
    auto layout = [&c](int64_t length) { return c.batch_first ? Shape{c.N, length, c.E} : Shape{length, c.N, c.E}; };
    std::vector<Input> in = {normal(layout(c.L))};
    if (!c.self) in.push_back(normal(layout(c.S))), in.push_back(normal(layout(c.S)));
    append_masks(in, c.masks, c.N, c.H, c.L, c.S);
    json names = json::array();
    for (const Input& p : parameter_inputs(*make(), names)) in.push_back(p);
    json params = {{"embed_dim", c.E}, {"num_heads", c.H}, {"batch_first", c.batch_first}, {"bias", c.bias},
                   {"self_attention", c.self}, {"names", names}};
    params.update(mask_params(c.masks));
    add(c.name, "multihead_attention", params, in,
        module_fn<nn::MultiheadAttention>(make, [c](nn::MultiheadAttention& m, const std::vector<Tensor>& x) {
          const auto [key_padding, attn] = take_masks(x, c.self ? 1 : 3, c.masks);
          const Tensor& q = x[0];
          return c.self ? m.forward(q, q, q, key_padding, attn, c.masks.causal)
                        : m.forward(q, x[1], x[2], key_padding, attn, c.masks.causal);
        }));
  }
}

// Post-norm and pre-norm, ReLU and GELU, dropout 0 (the layer in training mode).
void transformer_encoder_layer_cases(const CaseList& add) {
  struct Tel {
    std::string name;
    int64_t d, H, ffn, N, L;
    bool norm_first, gelu, batch_first;
    Masks masks;
  };
  const std::vector<Tel> cases = {
      {"tel_post_norm_relu", 16, 2, 32, 2, 9, false, false, false, {}},
      {"tel_pre_norm_gelu_batch_first_key_padding", 16, 4, 32, 2, 11, true, true, true, {true, "none", false}},
      {"tel_post_norm_gelu_bool_mask_key_padding", 24, 4, 32, 2, 10, false, true, false, {true, "bool", false}},
      {"tel_pre_norm_relu_additive_mask", 16, 2, 32, 2, 8, true, false, false, {false, "additive", false}},
      {"tel_pre_norm_gelu_causal", 24, 2, 32, 2, 13, true, true, true, {false, "none", true}},
      {"tel_post_norm_relu_batch_first_causal_key_padding", 16, 2, 32, 2, 12, false, false, true,
       {true, "none", true}},
  };
  for (const Tel& c : cases) {
    nn::TransformerEncoderLayer::Options o;
    o.dim_feedforward = c.ffn, o.dropout = 0.0, o.batch_first = c.batch_first, o.norm_first = c.norm_first;
    o.activation = c.gelu ? nn::TransformerActivation::Gelu : nn::TransformerActivation::Relu;
    std::function<std::shared_ptr<nn::TransformerEncoderLayer>()> make = [c, o] {
      Generator gen(0);
      return std::make_shared<nn::TransformerEncoderLayer>(c.d, c.H, o, gen);
    };
    std::vector<Input> in = {normal(c.batch_first ? Shape{c.N, c.L, c.d} : Shape{c.L, c.N, c.d})};
    append_masks(in, c.masks, c.N, c.H, c.L, c.L);
    json names = json::array();
    for (const Input& p : parameter_inputs(*make(), names)) in.push_back(p);
    json params = {{"d_model", c.d},
                   {"nhead", c.H},
                   {"dim_feedforward", c.ffn},
                   {"activation", c.gelu ? "gelu" : "relu"},
                   {"norm_first", c.norm_first},
                   {"batch_first", c.batch_first},
                   {"layer_norm_eps", o.layer_norm_eps},
                   {"names", names}};
    params.update(mask_params(c.masks));
    add(c.name, "transformer_encoder_layer", params, in,
        module_fn<nn::TransformerEncoderLayer>(make, [c](nn::TransformerEncoderLayer& m, const std::vector<Tensor>& x) {
          const auto [key_padding, attn] = take_masks(x, 1, c.masks);
          return m.forward(x[0], attn, key_padding, c.masks.causal);
        }));
  }
}

}  // namespace

void module_cases(const CaseList& add) {
  multihead_attention_cases(add);
  transformer_encoder_layer_cases(add);
}

}  // namespace demi::crosscheck

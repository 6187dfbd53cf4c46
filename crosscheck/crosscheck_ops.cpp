// crosscheck_ops: runs the ops of demi's functional API on seeded inputs (fp32, bf16, fp16, and fp32
// under bf16 / fp16 autocast), forward and backward, and writes the inputs, the upstream gradient,
// the outputs and the input gradients to one safetensors file (and, in mode "optim", the
// trajectories of SGD and AdamW, with and without OneCycle, and global-norm clipping; in the modes
// models_*, a training step of each net of models/) whose metadata lists the cases.
// crosscheck/compare.py runs the same cases in PyTorch (in the same dtype, and in float64 as the
// reference) and reports where demi computes something else, or less accurately.
// scripts/crosscheck-pytorch builds and runs both.
//
// Usage: crosscheck_ops [--device cpu|cuda] OUT.safetensors
// On cuda the inputs are drawn on the CPU (the same bits) and moved; compare.py's PyTorch runs on
// the CPU either way, so a CUDA run holds demi's CUDA kernels against PyTorch's CPU ones.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/kernels.h"
#include "framework/demi/demi.h"
#include "models/models.h"

namespace demi {
namespace {

using json = nlohmann::json;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

Device g_device = Device::cpu();  // where the ops run (--device)

// How an input's values are drawn: in fp32, then rounded to the case's dtype, so that both
// frameworks see the same values.
enum class Draw { Normal, Positive, AwayFromZero, Special, SpecialShifted, Ties, Labels, DropoutKeep, LargeMean };

// Dropout's training rows: demi's mask for p = kDropoutP under Generator(kDropoutSeed), 1 where kept,
// is an input too (Draw::DropoutKeep), which PyTorch applies: its own RNG would draw another mask.
constexpr double kDropoutP = 0.3;
constexpr uint64_t kDropoutSeed = 11;

struct Input {
  Shape shape;
  Draw draw = Draw::Normal;
  bool grad = true;     // its gradient is compared
  bool fp32 = false;    // fp32 whatever the case's dtype (batch norm's parameters and statistics)
  int64_t classes = 0;  // Draw::Labels: values in [0, classes)
};

struct Case {
  std::string name;  // unique within a dtype
  std::string op;    // compare.py's key
  json params;       // the op's arguments, for compare.py
  std::vector<Input> inputs;
  Fn fn;  // outputs: the first is differentiated, the others (running statistics) only compared
  bool backward = true;
};

// Values on which vectorised math, masks and rounding go wrong: signed zeros, infinities, NaN,
// fp32 and half subnormals, the edges of exp's range, the limits of fp16 and of fp32.
const std::vector<float> kSpecials = {
    0.0f, -0.0f,   INFINITY, -INFINITY, NAN,    1e-40f, -1e-40f, 1e-45f, 6e-8f, -6e-8f, 1e-5f,  1e30f,  -1e30f,
    88.8f, -88.8f, -104.0f,  65504.0f,  7e4f,   -7e4f,  0.5f,    -0.5f,  1.0f,  -1.0f,  3e38f,  2.0f,   -3.0f,
    1e-3f, -1e-3f, 11.1f,    -11.1f,    100.0f, -100.0f};

Tensor draw_on_cpu(const Input& in, DType dtype, Generator& gen) {
  const DType t = in.fp32 ? DType::F32 : dtype;
  const int64_t n = shape_numel(in.shape);
  switch (in.draw) {
    case Draw::Normal: return randn(in.shape, gen).to(t);
    case Draw::Positive: return exp(randn(in.shape, gen) * 0.5).to(t);
    case Draw::AwayFromZero: {
      std::vector<float> v = randn(in.shape, gen).to_vector<float>();
      for (float& e : v) e = e >= 0 ? e + 0.5f : e - 0.5f;
      return tensor(v, in.shape, t);
    }
    case Draw::Special:
    case Draw::SpecialShifted: {  // the specials over and over: vector bodies and scalar tails
      const size_t shift = in.draw == Draw::SpecialShifted ? 7 : 0;
      std::vector<float> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = kSpecials[(i + shift + i / kSpecials.size()) % kSpecials.size()];
      return tensor(v, in.shape, t);
    }
    case Draw::Ties: {  // 0, 1 or 2: equal values in every window and row
      std::vector<float> v = rand(in.shape, gen).to_vector<float>();
      for (float& e : v) e = std::floor(e * 3.0f);
      return tensor(v, in.shape, t);
    }
    case Draw::Labels: {
      const std::vector<float> u = rand(in.shape, gen).to_vector<float>();
      std::vector<int64_t> v(u.size());
      for (size_t i = 0; i < u.size(); ++i) v[i] = std::min<int64_t>(in.classes - 1, static_cast<int64_t>(u[i] * in.classes));
      return tensor(v, in.shape);
    }
    case Draw::DropoutKeep: {
      Generator keep(kDropoutSeed);
      return (dropout(ones(in.shape), kDropoutP, true, keep) != 0.0).to(t);
    }
    case Draw::LargeMean:  // N(1e4, 1), or N(100, 1) in half types: their spacing at 1e4 is 8 or 64
      return (randn(in.shape, gen) + (is_half(t) ? 100.0 : 1e4)).to(t);
  }
  return Tensor();
}

Tensor draw(const Input& in, DType dtype, Generator& gen) { return draw_on_cpu(in, dtype, gen).to(g_device); }

Input normal(Shape s) { return {std::move(s)}; }
Input positive(Shape s) { return {std::move(s), Draw::Positive}; }
Input away(Shape s) { return {std::move(s), Draw::AwayFromZero}; }
Input special(Shape s, Draw d = Draw::Special) { return {std::move(s), d}; }
Input ties(Shape s) { return {std::move(s), Draw::Ties}; }
Input labels(Shape s, int64_t classes) { return {std::move(s), Draw::Labels, false, false, classes}; }
Input fp32_param(Shape s) { return {std::move(s), Draw::Normal, true, true}; }
Input fp32_state(Shape s, Draw d) { return {std::move(s), d, false, true}; }
Input no_grad(Input in) {
  in.grad = false;
  return in;
}

Fn one(std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; };
}

Tensor binary(const std::string& op, const Tensor& a, const Tensor& b) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  return a / b;
}

Tensor compare(const std::string& op, const Tensor& a, const Tensor& b) {
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  return a >= b;
}

// Dropout: the identity for p = 0 and in eval; p = 1 gives x * 0 (NaN for inf and NaN); in between,
// demi's own mask (the second input), so that the scaling by 1 / (1 - p) is what is compared.
// Embedding: duplicate indices (the backward's sums), a padding row among them.
void add_dropout_embedding_cases(std::vector<Case>& c) {
  auto add = [&c](std::string name, std::string op, json params, std::vector<Input> in, Fn fn) {
    c.push_back({std::move(name), std::move(op), std::move(params), std::move(in), std::move(fn), true});
  };
  auto drop = [](double p, bool training) {
    return one([p, training](auto& x) { Generator g(kDropoutSeed); return dropout(x[0], p, training, g); });
  };
  const Input keep67{{67, 37}, Draw::DropoutKeep, false}, keep131{{131}, Draw::DropoutKeep, false};
  add("dropout_p0", "dropout", {{"p", 0.0}, {"training", true}}, {normal({67, 37})}, drop(0.0, true));
  add("dropout_eval", "dropout", {{"p", 0.5}, {"training", false}}, {normal({67, 37})}, drop(0.5, false));
  add("dropout_p1_specials", "dropout", {{"p", 1.0}, {"training", true}}, {special({131})}, drop(1.0, true));
  add("dropout_scale", "dropout", {{"p", kDropoutP}, {"training", true}}, {normal({67, 37}), keep67}, drop(kDropoutP, true));
  add("dropout_scale_specials", "dropout", {{"p", kDropoutP}, {"training", true}}, {special({131}), keep131},
      drop(kDropoutP, true));
  add("embedding", "embedding", {{"padding_idx", nullptr}}, {normal({50, 37}), labels({4, 33}, 50)},
      one([](auto& x) { return embedding(x[0], x[1]); }));
  add("embedding_padding", "embedding", {{"padding_idx", 3}}, {normal({10, 8}), labels({64}, 10)},
      one([](auto& x) { return embedding(x[0], x[1], 3); }));
}

// abs, the extremes (ties and NaN: which element gets the gradient), where / masked_fill (cond
// drawn as 0, 1, 2 and compared with 0.5), the layout ops and matmul's broadcast batches.
template <typename Add>
void tensor_op_cases(Add& add, const Shape& r) {
  const json all = {{"dim", nullptr}, {"keepdim", false}};
  add("abs", "abs", {}, {normal({67, 37})}, one([](auto& x) { return abs(x[0]); }));
  add("abs_specials", "abs", {}, {special({131})}, one([](auto& x) { return abs(x[0]); }));
  add("max_all", "max", {}, {normal(r)}, one([](auto& x) { return max(x[0]); }));
  add("max_all_specials", "max", {}, {special({131})}, one([](auto& x) { return max(x[0]); }));
  add("min_all_ties", "min", {}, {ties(r)}, one([](auto& x) { return min(x[0]); }));
  add("amax_dims02", "amax", {{"dims", {0, 2}}, {"keepdim", false}}, {normal(r)}, one([](auto& x) { return amax(x[0], {0, 2}); }));
  add("amax_dim1_ties_keepdim", "amax", {{"dims", {1}}, {"keepdim", true}}, {ties(r)},
      one([](auto& x) { return amax(x[0], {1}, true); }));
  add("amin_dim_neg1_specials", "amin", {{"dims", {-1}}, {"keepdim", false}}, {special({4, 33})},
      one([](auto& x) { return amin(x[0], {-1}); }));
  auto pair = [](std::tuple<Tensor, Tensor> t) { return std::vector<Tensor>{std::get<0>(t), std::get<1>(t)}; };
  add("max_dim1_ties", "max_dim", {{"dim", 1}, {"keepdim", false}}, {ties(r)},
      [pair](auto& x) { return pair(max(x[0], 1)); });
  add("min_dim_neg1_keepdim_specials", "min_dim", {{"dim", -1}, {"keepdim", true}}, {special({4, 33})},
      [pair](auto& x) { return pair(min(x[0], -1, true)); });
  add("argmin_all", "argmin", all, {no_grad(normal(r))}, one([](auto& x) { return argmin(x[0]); }), false);
  add("argmin_dim1_ties", "argmin", {{"dim", 1}, {"keepdim", false}}, {no_grad(ties(r))},
      one([](auto& x) { return argmin(x[0], 1); }), false);
  add("where_broadcast", "where", {}, {no_grad(ties({3, 1, 37})), normal({5, 1}), normal({37})},
      one([](auto& x) { return where(x[0] > 0.5, x[1], x[2]); }));
  add("where_specials", "where", {}, {no_grad(ties({131})), special({131}), special({131}, Draw::SpecialShifted)},
      one([](auto& x) { return where(x[0] > 0.5, x[1], x[2]); }));
  add("where_scalar", "where_scalar", {{"value", 0.0}}, {no_grad(ties({67, 37})), normal({67, 37})},
      one([](auto& x) { return where(x[0] > 0.5, x[1], 0.0); }));
  add("masked_fill_row", "masked_fill", {{"value", "-1e4"}}, {normal({4, 37}), no_grad(ties({37}))},
      one([](auto& x) { return masked_fill(x[0], x[1] > 0.5, -1e4); }));
  add("masked_fill_inf", "masked_fill", {{"value", "-inf"}}, {normal({4, 37}), no_grad(ties({4, 37}))},
      one([](auto& x) { return masked_fill(x[0], x[1] > 0.5, -INFINITY); }));
  add("permute", "permute", {{"dims", {2, 0, 1}}}, {normal(r)}, one([](auto& x) { return permute(x[0], {2, 0, 1}); }));
  add("permute_neg", "permute", {{"dims", {-1, 1, 0, -2}}}, {normal({2, 3, 4, 5})},
      one([](auto& x) { return permute(x[0], {-1, 1, 0, -2}); }));
  add("unsqueeze", "unsqueeze", {{"dim", -2}}, {normal(r)}, one([](auto& x) { return unsqueeze(x[0], -2); }));
  add("squeeze", "squeeze", {{"dim", nullptr}}, {normal({5, 1, 9, 1})}, one([](auto& x) { return squeeze(x[0]); }));
  add("squeeze_dim", "squeeze", {{"dim", 1}}, {normal({5, 1, 9})}, one([](auto& x) { return squeeze(x[0], 1); }));
  add("expand", "expand", {{"shape", {2, 5, 4, -1}}}, {normal({5, 1, 9})},
      one([](auto& x) { return expand(x[0], {2, 5, 4, -1}); }));
  auto mm = one([](auto& x) { return matmul(x[0], x[1]); });
  add("matmul_broadcast_batch", "matmul", {}, {normal({2, 1, 17, 19}), normal({3, 19, 23})}, mm);
  add("matmul_shared_first", "matmul", {}, {normal({17, 19}), normal({3, 19, 23})}, mm);
  add("matmul_4d_attention", "matmul", {}, {normal({2, 4, 33, 16}), normal({2, 4, 16, 33})}, mm);
  add("matmul_vector_batch", "matmul", {}, {normal({19}), normal({3, 19, 23})}, mm);
  add("matmul_dot", "matmul", {}, {normal({67}), normal({67})}, mm);
}

// Layer norm over one and two trailing dims, with weight and bias in the case's dtype or fp32
// beside it (torch's mixed layer_norm), weight only, neither, and rows of mean 1e4 (100 in the half
// types) and deviation 1, where E[x^2] - E[x]^2, or folding the mean into a bias, loses the digits
// that matter.
void add_layer_norm_cases(std::vector<Case>& c) {
  auto add = [&c](std::string name, Input x, Shape norm, int params, bool fp32_params, double eps) {
    std::vector<Input> in = {std::move(x)};
    for (int i = 0; i < params; ++i) in.push_back(fp32_params ? fp32_param(norm) : normal(norm));
    const json p = {{"normalized_shape", norm}, {"eps", eps}};
    c.push_back({std::move(name), "layer_norm", p, std::move(in), one([=](auto& t) {
                   const Tensor w = params > 0 ? t[1] : Tensor(), b = params > 1 ? t[2] : Tensor();
                   return layer_norm(t[0], norm, w, b, eps);
                 }),
                 true});
  };
  add("layer_norm", normal({16, 3, 37}), {37}, 2, false, 1e-5);
  add("layer_norm_fp32_params", normal({16, 3, 37}), {37}, 2, true, 1e-5);
  add("layer_norm_cct", normal({4, 64, 128}), {128}, 2, true, 1e-5);
  add("layer_norm_two_dims", normal({4, 6, 10}), {6, 10}, 2, false, 1e-3);
  add("layer_norm_weight_only", normal({9, 33}), {33}, 1, false, 1e-5);
  add("layer_norm_no_affine", normal({9, 256}), {256}, 0, false, 1e-5);
  add("layer_norm_large_mean", {{8, 256}, Draw::LargeMean}, {256}, 2, true, 1e-5);
}

// The cases run with inputs in fp32, bf16 and fp16.
std::vector<Case> dtype_cases() {
  std::vector<Case> c;
  auto add = [&c](std::string name, std::string op, json params, std::vector<Input> in, Fn fn, bool backward = true) {
    c.push_back({std::move(name), std::move(op), std::move(params), std::move(in), std::move(fn), backward});
  };

  // Element-wise: 67 x 37 (vector bodies and tails), broadcasting, and the specials against each other.
  for (const std::string op : {"add", "sub", "mul", "div"}) {
    const bool div = op == "div";
    auto f = one([op](auto& x) { return binary(op, x[0], x[1]); });
    add(op + "_same", op, {}, {normal({67, 37}), div ? away({67, 37}) : normal({67, 37})}, f);
    add(op + "_broadcast", op, {}, {normal({3, 1, 37}), div ? away({5, 1}) : normal({5, 1})}, f);
    add(op + "_specials", op, {}, {special({131}), special({131}, Draw::SpecialShifted)}, f);
  }
  add("affine", "affine", {{"alpha", 2.5}, {"beta", -1.25}}, {normal({67, 37})},
      one([](auto& x) { return x[0] * 2.5 - 1.25; }));
  add("rsub_scalar", "rsub_scalar", {{"value", 1.0}}, {normal({131})}, one([](auto& x) { return 1.0 - x[0]; }));
  add("rdiv_scalar", "rdiv_scalar", {{"value", 3.0}}, {away({131})}, one([](auto& x) { return 3.0 / x[0]; }));
  add("div_scalar_specials", "div_scalar", {{"value", 3.0}}, {special({131})}, one([](auto& x) { return x[0] / 3.0; }));
  // Mixed dtypes: an fp32 tensor widens the result; an fp32 0-d tensor does not.
  add("add_fp32_row", "add", {}, {normal({67, 37}), fp32_param({37})}, one([](auto& x) { return x[0] + x[1]; }));
  add("mul_fp32_0d", "mul", {}, {normal({67, 37}), fp32_param({})}, one([](auto& x) { return x[0] * x[1]; }));

  // Unary functions on ordinary values and on the specials.
  struct Unary {
    std::string op;
    json params;
    Draw domain;
    std::function<Tensor(const Tensor&)> f;
  };
  const std::vector<Unary> unary = {
      {"neg", {}, Draw::Normal, [](const Tensor& x) { return -x; }},
      {"exp", {}, Draw::Normal, [](const Tensor& x) { return exp(x); }},
      {"log", {}, Draw::Positive, [](const Tensor& x) { return log(x); }},
      {"sqrt", {}, Draw::Positive, [](const Tensor& x) { return sqrt(x); }},
      {"pow", {{"exponent", 2.0}}, Draw::Normal, [](const Tensor& x) { return pow(x, 2.0); }},
      {"pow", {{"exponent", 3.0}}, Draw::Normal, [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow", {{"exponent", 0.5}}, Draw::Positive, [](const Tensor& x) { return pow(x, 0.5); }},
      {"pow", {{"exponent", -1.0}}, Draw::AwayFromZero, [](const Tensor& x) { return pow(x, -1.0); }},
      {"pow", {{"exponent", -2.5}}, Draw::Positive, [](const Tensor& x) { return pow(x, -2.5); }},
      {"pow", {{"exponent", 0.0}}, Draw::Normal, [](const Tensor& x) { return pow(x, 0.0); }},
      {"relu", {}, Draw::Normal, [](const Tensor& x) { return relu(x); }},
      {"gelu", {}, Draw::Normal, [](const Tensor& x) { return gelu(x); }},
      {"clamp", {{"min", -0.5}, {"max", 0.7}}, Draw::Normal, [](const Tensor& x) { return clamp(x, -0.5, 0.7); }},
      {"clamp", {{"min", -0.5}}, Draw::Normal, [](const Tensor& x) { return clamp(x, -0.5); }},
      {"clamp", {{"max", 0.7}}, Draw::Normal, [](const Tensor& x) { return clamp(x, std::nullopt, 0.7); }},
  };
  for (const Unary& u : unary) {
    std::string name = u.op;
    for (const auto& [key, value] : u.params.items()) name += "_" + key + "=" + value.dump();
    add(name, u.op, u.params, {{{67, 37}, u.domain}}, one([f = u.f](auto& x) { return f(x[0]); }));
    add(name + "_specials", u.op, u.params, {special({131})}, one([f = u.f](auto& x) { return f(x[0]); }));
  }
  // clamp's bounds themselves (PyTorch passes the gradient at x == min and x == max).
  add("clamp_at_bounds", "clamp", {{"min", -0.5}, {"max", 1.0}}, {special({131})},
      one([](auto& x) { return clamp(x[0], -0.5, 1.0); }));

  // Comparisons (no gradient): the specials against each other, and against a scalar.
  for (const std::string op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    add(op + "_specials", op, {}, {no_grad(special({131})), no_grad(special({131}, Draw::SpecialShifted))},
        one([op](auto& x) { return compare(op, x[0], x[1]); }), false);
  }
  add("lt_scalar_specials", "lt_scalar", {{"value", 0.5}}, {no_grad(special({131}))},
      one([](auto& x) { return x[0] < 0.5; }), false);

  // Reductions.
  const Shape r{5, 67, 9};
  add("sum_all", "sum", {{"dims", json::array()}, {"keepdim", false}}, {normal(r)}, one([](auto& x) { return sum(x[0]); }));
  add("sum_dim1", "sum", {{"dims", {1}}, {"keepdim", false}}, {normal(r)}, one([](auto& x) { return sum(x[0], {1}); }));
  add("sum_dims02_keepdim", "sum", {{"dims", {0, 2}}, {"keepdim", true}}, {normal(r)},
      one([](auto& x) { return sum(x[0], {0, 2}, true); }));
  add("sum_dim_neg1", "sum", {{"dims", {-1}}, {"keepdim", false}}, {normal(r)}, one([](auto& x) { return sum(x[0], {-1}); }));
  add("mean_all", "mean", {{"dims", json::array()}, {"keepdim", false}}, {normal(r)}, one([](auto& x) { return mean(x[0]); }));
  add("mean_dims12_keepdim", "mean", {{"dims", {1, 2}}, {"keepdim", true}}, {normal(r)},
      one([](auto& x) { return mean(x[0], {1, 2}, true); }));
  add("sum_specials", "sum", {{"dims", {1}}, {"keepdim", false}}, {special({4, 33})}, one([](auto& x) { return sum(x[0], {1}); }));
  add("sum_large", "sum", {{"dims", json::array()}, {"keepdim", false}}, {positive({100000})},
      one([](auto& x) { return sum(x[0]); }));
  add("mean_large_rows", "mean", {{"dims", {1}}, {"keepdim", false}}, {positive({3, 20000})},
      one([](auto& x) { return mean(x[0], {1}); }));
  add("argmax_all", "argmax", {{"dim", nullptr}, {"keepdim", false}}, {no_grad(normal(r))},
      one([](auto& x) { return argmax(x[0]); }), false);
  add("argmax_dim1_ties", "argmax", {{"dim", 1}, {"keepdim", false}}, {no_grad(ties(r))},
      one([](auto& x) { return argmax(x[0], 1); }), false);
  add("argmax_dim_neg1_keepdim_specials", "argmax", {{"dim", -1}, {"keepdim", true}}, {no_grad(special({4, 33}))},
      one([](auto& x) { return argmax(x[0], -1, true); }), false);

  // Shapes.
  add("reshape", "reshape", {{"shape", {9, -1}}}, {normal(r)}, one([](auto& x) { return x[0].reshape({9, -1}); }));
  add("transpose_0_2", "transpose", {{"dim0", 0}, {"dim1", 2}}, {normal(r)},
      one([](auto& x) { return transpose(x[0], 0, 2); }));
  add("transpose_neg", "transpose", {{"dim0", -1}, {"dim1", 1}}, {normal({2, 3, 4, 5})},
      one([](auto& x) { return transpose(x[0], -1, 1); }));
  // select takes dim 0 only (a view of contiguous rows); other dims raise an error naming the fix.
  add("select_0_3", "select", {{"dim", 0}, {"index", 3}}, {normal(r)}, one([](auto& x) { return select(x[0], 0, 3); }));
  add("select_0_neg", "select", {{"dim", 0}, {"index", -2}}, {normal(r)}, one([](auto& x) { return select(x[0], 0, -2); }));
  add("cat_dim1", "cat", {{"dim", 1}}, {normal({2, 3, 5}), normal({2, 1, 5}), normal({2, 4, 5})},
      one([](auto& x) { return cat({x[0], x[1], x[2]}, 1); }));
  add("cat_dim_neg1", "cat", {{"dim", -1}}, {normal({3, 2}), normal({3, 7})}, one([](auto& x) { return cat({x[0], x[1]}, -1); }));
  add("cat_with_fp32", "cat", {{"dim", 0}}, {normal({3, 5}), fp32_param({2, 5})}, one([](auto& x) { return cat({x[0], x[1]}, 0); }));
  add("matmul_with_fp32", "matmul", {}, {normal({4, 6}), fp32_param({6, 3})}, one([](auto& x) { return matmul(x[0], x[1]); }));

  // Products.
  add("matmul_2d", "matmul", {}, {normal({33, 47}), normal({47, 29})}, one([](auto& x) { return matmul(x[0], x[1]); }));
  add("matmul_3d_2d", "matmul", {}, {normal({3, 17, 19}), normal({19, 23})}, one([](auto& x) { return matmul(x[0], x[1]); }));
  add("matmul_3d_3d", "matmul", {}, {normal({3, 17, 19}), normal({3, 19, 23})}, one([](auto& x) { return matmul(x[0], x[1]); }));
  add("matmul_long_k", "matmul", {}, {normal({8, 4096}), normal({4096, 8})}, one([](auto& x) { return matmul(x[0], x[1]); }));
  add("linear_bias", "linear", {}, {normal({7, 33}), normal({29, 33}), normal({29})},
      one([](auto& x) { return linear(x[0], x[1], x[2]); }));
  add("linear_3d_no_bias", "linear", {}, {normal({2, 5, 33}), normal({29, 33})},
      one([](auto& x) { return linear(x[0], x[1]); }));

  // Convolutions: the small direct shapes, and ones that reach the packed, Winograd and implicit paths.
  struct Conv {
    std::string name;
    Shape x, w;
    bool bias;
    int stride, padding;
  };
  const std::vector<Conv> convs = {
      {"conv2d_3x3_p1_bias", {4, 3, 9, 11}, {5, 3, 3, 3}, true, 1, 1},
      {"conv2d_3x3_p1_winograd", {8, 32, 16, 16}, {32, 32, 3, 3}, false, 1, 1},
      {"conv2d_3x3_p1_7x7", {8, 64, 7, 7}, {64, 64, 3, 3}, false, 1, 1},
      {"conv2d_3x3_p1_odd_channels", {3, 24, 15, 15}, {40, 24, 3, 3}, true, 1, 1},
      {"conv2d_5x5_p2", {2, 6, 13, 13}, {7, 6, 5, 5}, true, 1, 2},
      {"conv2d_1x1", {4, 16, 8, 8}, {24, 16, 1, 1}, false, 1, 0},
      {"conv2d_3x3_s2_p1", {4, 8, 17, 17}, {12, 8, 3, 3}, true, 2, 1},
      {"conv2d_2x2_stem", {4, 3, 32, 32}, {24, 3, 2, 2}, true, 1, 0},
      {"conv2d_3x3_s2_p0", {2, 5, 10, 9}, {6, 5, 3, 3}, false, 2, 0},
  };
  for (const Conv& v : convs) {
    std::vector<Input> in = {normal(v.x), normal(v.w)};
    if (v.bias) in.push_back(normal({v.w[0]}));
    add(v.name, "conv2d", {{"stride", v.stride}, {"padding", v.padding}}, in,
        one([v](auto& x) { return conv2d(x[0], x[1], v.bias ? x[2] : Tensor(), v.stride, v.padding); }));
  }

  // Pools, with ties (which input gets max's gradient) and NaN.
  struct Pool {
    std::string name;
    Input x;
    int k, stride, padding;
  };
  const std::vector<Pool> pools = {
      {"k2", normal({4, 3, 32, 32}), 2, 0, 0},      {"k2_odd", normal({2, 3, 15, 15}), 2, 0, 0},
      {"k3_s2_p1", normal({2, 3, 9, 10}), 3, 2, 1}, {"k3_s1_p1", normal({2, 3, 8, 7}), 3, 1, 1},
      {"k2_ties", ties({2, 3, 16, 16}), 2, 0, 0},   {"k3_s1_p1_ties", ties({2, 3, 8, 8}), 3, 1, 1},
      {"k2_specials", special({2, 3, 8, 8}), 2, 0, 0},
  };
  for (const Pool& p : pools) {
    const json params = {{"kernel_size", p.k}, {"stride", p.stride}, {"padding", p.padding}};
    add("max_pool2d_" + p.name, "max_pool2d", params, {p.x},
        one([p](auto& x) { return max_pool2d(x[0], p.k, p.stride, p.padding); }));
    add("avg_pool2d_" + p.name, "avg_pool2d", params, {p.x},
        one([p](auto& x) { return avg_pool2d(x[0], p.k, p.stride, p.padding); }));
  }
  add("global_avg_pool2d", "global_avg_pool2d", {}, {normal({4, 5, 7, 7})}, one([](auto& x) { return global_avg_pool2d(x[0]); }));
  add("global_max_pool2d", "global_max_pool2d", {}, {normal({4, 5, 7, 7})}, one([](auto& x) { return global_max_pool2d(x[0]); }));
  add("global_max_pool2d_ties", "global_max_pool2d", {}, {ties({4, 5, 3, 3})},
      one([](auto& x) { return global_max_pool2d(x[0]); }));

  // Batch norm: training (batch statistics, running statistics updated: outputs 1 and 2) and eval.
  // act: "none", "relu" (batch_norm_relu) or "gelu" (batch_norm_gelu).
  auto bn = [&add](const std::string& name, Shape x, bool training, bool affine, const std::string& act, double momentum,
                   double eps) {
    const int64_t ch = x[1];
    std::vector<Input> in = {normal(x), fp32_state({ch}, Draw::Normal), fp32_state({ch}, Draw::Positive)};
    if (affine) in.push_back(fp32_param({ch})), in.push_back(fp32_param({ch}));
    const json params = {{"training", training}, {"momentum", momentum}, {"eps", eps}, {"activation", act}};
    add(name, "batch_norm", params, in, [=](const std::vector<Tensor>& t) {
      BatchNormOptions o;
      o.training = training, o.momentum = momentum, o.eps = eps;
      const Tensor w = affine ? t[3] : Tensor(), b = affine ? t[4] : Tensor();
      const Tensor y = act == "relu"   ? batch_norm_relu(t[0], t[1], t[2], w, b, o)
                       : act == "gelu" ? batch_norm_gelu(t[0], t[1], t[2], w, b, o)
                                       : batch_norm(t[0], t[1], t[2], w, b, o);
      return std::vector<Tensor>{y, t[1], t[2]};
    });
  };
  bn("batch_norm_train", {8, 5, 6, 7}, true, true, "none", 0.1, 1e-5);
  bn("batch_norm_train_relu", {8, 5, 6, 7}, true, true, "relu", 0.1, 1e-5);
  bn("batch_norm_train_gelu", {8, 5, 6, 7}, true, true, "gelu", 0.1, 1e-5);
  bn("batch_norm_train_2d", {16, 7}, true, true, "none", 0.3, 1e-3);
  bn("batch_norm_train_no_affine", {4, 6, 5, 5}, true, false, "none", 0.1, 1e-5);
  bn("batch_norm_train_large", {32, 16, 16, 16}, true, true, "relu", 0.1, 1e-5);
  bn("batch_norm_train_large_gelu", {32, 16, 15, 15}, true, true, "gelu", 0.1, 1e-5);
  // Planes of 143 values: bf16 takes its ISA passes from 100 values on, here with a 15-value tail.
  bn("batch_norm_train_planes_with_tails", {6, 4, 11, 13}, true, true, "none", 0.1, 1e-5);
  bn("batch_norm_eval_relu_planes_with_tails", {6, 4, 11, 13}, false, true, "relu", 0.1, 1e-5);
  bn("batch_norm_eval", {8, 5, 6, 7}, false, true, "none", 0.1, 1e-5);
  bn("batch_norm_eval_relu", {8, 5, 6, 7}, false, true, "relu", 0.1, 1e-5);

  // Softmax family and the loss.
  add("softmax", "softmax", {{"dim", -1}}, {normal({7, 67})}, one([](auto& x) { return softmax(x[0]); }));
  add("softmax_3d", "softmax", {{"dim", 2}}, {normal({3, 4, 10})}, one([](auto& x) { return softmax(x[0], 2); }));
  add("log_softmax", "log_softmax", {{"dim", -1}}, {normal({7, 67})}, one([](auto& x) { return log_softmax(x[0]); }));
  add("softmax_specials", "softmax", {{"dim", -1}}, {special({4, 33})}, one([](auto& x) { return softmax(x[0]); }));
  add("log_softmax_specials", "log_softmax", {{"dim", -1}}, {special({4, 33})}, one([](auto& x) { return log_softmax(x[0]); }));
  add("softmax_large_logits", "softmax", {{"dim", -1}}, {normal({5, 40})},
      one([](auto& x) { return softmax(x[0] * 1000.0); }));
  for (double smoothing : {0.0, 0.1}) {
    const std::string s = smoothing == 0.0 ? "" : "_smoothing";
    add("cross_entropy" + s, "cross_entropy", {{"label_smoothing", smoothing}}, {normal({9, 13}), labels({9}, 13)},
        one([smoothing](auto& x) { return cross_entropy(x[0], x[1], {smoothing}); }));
    add("cross_entropy_wide" + s, "cross_entropy", {{"label_smoothing", smoothing}}, {normal({64, 1000}), labels({64}, 1000)},
        one([smoothing](auto& x) { return cross_entropy(x[0], x[1], {smoothing}); }));
  }
  add("cross_entropy_confident", "cross_entropy", {{"label_smoothing", 0.0}}, {normal({9, 13}), labels({9}, 13)},
      one([](auto& x) { return cross_entropy(x[0] * 100.0, x[1]); }));
  add_dropout_embedding_cases(c);
  tensor_op_cases(add, r);

  // Attention: L and S past the CPU's tiles with tails, odd E; a bool mask (drawn 0 / 1, passed as
  // uint8) per key, an additive mask with its gradient, causal rows with L < S and L > S, logits of
  // tens of units (q scaled by 30).
  auto sdpa = [](const std::string& mask, bool causal, double q_scale = 1.0) {
    return one([=](auto& x) {
      const Tensor q = q_scale == 1.0 ? x[0] : x[0] * q_scale;
      const Tensor m = mask == "bool" ? x[3].to(DType::U8) : mask == "additive" ? x[3] : Tensor();
      return scaled_dot_product_attention(q, x[1], x[2], m, causal);
    });
  };
  const std::string op = "scaled_dot_product_attention";
  const Shape q{2, 3, 70, 17}, k{2, 3, 130, 17}, v{2, 3, 130, 9};
  add("sdpa", op, {{"mask", "none"}, {"causal", false}}, {normal(q), normal(k), normal(v)}, sdpa("none", false));
  add("sdpa_bool_mask", op, {{"mask", "bool"}, {"causal", false}},
      {normal(q), normal(k), normal(v), labels({2, 1, 1, 130}, 2)}, sdpa("bool", false));
  add("sdpa_additive_mask", op, {{"mask", "additive"}, {"causal", false}},
      {normal(q), normal(k), normal(v), normal({70, 130})}, sdpa("additive", false));
  add("sdpa_causal", op, {{"mask", "none"}, {"causal", true}}, {normal(q), normal(k), normal(v)}, sdpa("none", true));
  add("sdpa_causal_more_queries", op, {{"mask", "none"}, {"causal", true}},
      {normal({2, 2, 150, 16}), normal({2, 2, 70, 16}), normal({2, 2, 70, 8})}, sdpa("none", true));
  add("sdpa_large_logits", op, {{"mask", "none"}, {"causal", false}},
      {normal({2, 2, 33, 16}), normal({2, 2, 40, 16}), normal({2, 2, 40, 16})}, sdpa("none", false, 30.0));

  add_layer_norm_cases(c);
  return c;
}

// Optimizers and schedules (fp32 only): a parameter stepped kSteps times on given gradients; the
// outputs are the parameter after each step. Inputs: the parameter, then one gradient per step.
constexpr int kSteps = 6;

std::vector<Tensor> trajectory(const std::vector<Tensor>& in, const std::function<std::unique_ptr<optim::Optimizer>(Tensor&)>& make,
                               bool one_cycle = false) {
  Tensor p = in[0].clone().requires_grad_();
  std::unique_ptr<optim::Optimizer> opt = make(p);
  std::unique_ptr<optim::OneCycle> schedule = one_cycle ? std::make_unique<optim::OneCycle>(*opt, kSteps) : nullptr;
  std::vector<Tensor> out;
  for (int s = 0; s < kSteps; ++s) {
    p.set_grad(in[1 + s].clone());
    opt->step();
    if (schedule) schedule->step();
    out.push_back(p.detach().clone());
  }
  return out;
}

std::vector<Case> optim_cases() {
  std::vector<Case> c;
  std::vector<Input> in = {no_grad(normal({37}))};
  for (int s = 0; s < kSteps; ++s) in.push_back(no_grad(normal({37})));
  struct Sgd {
    std::string name;
    double momentum, dampening, weight_decay;
    bool nesterov, one_cycle;
  };
  for (const Sgd& v : std::vector<Sgd>{{"sgd_plain", 0, 0, 0, false, false},
                                       {"sgd_momentum", 0.9, 0, 0, false, false},
                                       {"sgd_momentum_dampening_decay", 0.9, 0.1, 5e-4, false, false},
                                       {"sgd_nesterov_decay", 0.9, 0, 5e-4, true, false},
                                       {"sgd_nesterov_one_cycle", 0.9, 0, 5e-4, true, true}}) {
    const json params = {{"lr", 0.1}, {"momentum", v.momentum}, {"dampening", v.dampening},
                         {"weight_decay", v.weight_decay}, {"nesterov", v.nesterov}, {"one_cycle", v.one_cycle}};
    c.push_back({v.name, "sgd", params, in, [v](const std::vector<Tensor>& t) {
                   return trajectory(t, [v](Tensor& p) {
                     optim::SGD::Options o;
                     o.lr = 0.1, o.momentum = v.momentum, o.dampening = v.dampening, o.weight_decay = v.weight_decay;
                     o.nesterov = v.nesterov;
                     return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, o);
                   }, v.one_cycle);
                 }, false});
  }
  for (const double decay : {0.0, 1e-2}) {
    const json params = {{"lr", 1e-2}, {"weight_decay", decay}, {"one_cycle", false}};
    c.push_back({decay == 0.0 ? "adamw_no_decay" : "adamw", "adamw", params, in, [decay](const std::vector<Tensor>& t) {
                   return trajectory(t, [decay](Tensor& p) {
                     optim::AdamW::Options o;
                     o.lr = 1e-2, o.weight_decay = decay;
                     return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
                   });
                 }, false});
  }
  c.push_back({"adamw_one_cycle", "adamw", {{"lr", 1e-2}, {"weight_decay", 1e-2}, {"one_cycle", true}}, in,
               [](const std::vector<Tensor>& t) {
                 return trajectory(t, [](Tensor& p) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, 1e-2); }, true);
               }, false});
  // Muon on a matrix (torch.optim.Muon's defaults, Nesterov, decoupled decay): 2-D, wide and tall.
  for (const Shape& shape : {Shape{12, 20}, Shape{20, 12}}) {
    std::vector<Input> mat = {no_grad(normal(shape))};
    for (int s = 0; s < kSteps; ++s) mat.push_back(no_grad(normal(shape)));
    c.push_back({"muon_" + std::to_string(shape[0]) + "x" + std::to_string(shape[1]), "muon", {{"lr", 2e-2}, {"one_cycle", false}},
                 mat, [](const std::vector<Tensor>& t) {
                   return trajectory(t, [](Tensor& p) {
                     optim::Muon::Options o;
                     o.lr = 2e-2;
                     return std::make_unique<optim::Muon>(std::vector<Tensor>{p}, o);
                   });
                 }, false});
  }
  // Clipping by the global norm over two gradients: the norm, then the clipped gradients; the last
  // with inf and NaN among them (an intended difference: demi leaves them, docs/pytorch.md).
  struct Clip {
    std::string name;
    double max_norm;
    Input first;
  };
  for (const Clip& v : std::vector<Clip>{{"clip_grad_norm", 1.0, no_grad(normal({37}))},
                                         {"clip_grad_norm_no_clip", 100.0, no_grad(normal({37}))},
                                         {"clip_grad_norm_non_finite", 1.0, no_grad(special({37}))}}) {
    const double max_norm = v.max_norm;
    c.push_back({v.name, "clip_grad_norm", {{"max_norm", max_norm}},
                 {v.first, no_grad(normal({5, 7}))}, [max_norm](const std::vector<Tensor>& t) {
                   Tensor a = zeros_like(t[0]).requires_grad_(), b = zeros_like(t[1]).requires_grad_();
                   a.set_grad(t[0].clone()), b.set_grad(t[1].clone());
                   const Tensor norm = nn::clip_grad_norm_({a, b}, max_norm);
                   return std::vector<Tensor>{norm, a.grad(), b.grad()};
                 }, false});
  }
  // GradScaler over eight fp16 steps: loss = sum(w16 * x16) * m_k in fp32; m_k = 1 and 2 make
  // the scaled gradient overflow fp16, so those steps are skipped and the scale backs off; three
  // clean steps in a row grow it again. Outputs: w after each step, then the scale after each.
  const std::vector<double> mults = {1e-3, 1.0, 1e-3, 1e-3, 1e-3, 2.0, 1e-3, 1e-3};
  std::vector<Input> amp_in = {no_grad(normal({5}))};
  for (size_t s = 0; s < mults.size(); ++s) amp_in.push_back(no_grad(normal({5})));
  c.push_back({"grad_scaler_fp16", "grad_scaler", {{"mults", mults}, {"growth_interval", 3}, {"lr", 0.1}}, amp_in,
               [mults](const std::vector<Tensor>& t) {
                 Tensor w = t[0].clone().requires_grad_();
                 optim::SGD opt({w}, 0.1);
                 amp::GradScaler::Options so;
                 so.growth_interval = 3;
                 amp::GradScaler scaler(so);
                 std::vector<Tensor> ws, scales;
                 for (size_t s = 0; s < mults.size(); ++s) {
                   opt.zero_grad();
                   const Tensor loss = sum(w.to(DType::F16) * t[1 + s].to(DType::F16)).to(DType::F32) * mults[s];
                   scaler.scale(loss).backward();
                   scaler.step(opt);
                   scaler.update();
                   ws.push_back(w.detach().clone());
                   scales.push_back(full({}, scaler.get_scale()));
                 }
                 ws.insert(ws.end(), scales.begin(), scales.end());
                 return ws;
               }, false});
  return c;
}

// The cases run on fp32 inputs under autocast: the output's dtype follows demi's policy, to be held
// against torch.autocast("cpu", dtype=...).
std::vector<Case> autocast_cases() {
  std::vector<Case> all = dtype_cases(), keep;
  const std::vector<std::string> ops = {"add", "mul", "exp", "log", "sqrt", "pow", "relu", "gelu", "sum", "mean",
                                        "matmul", "linear", "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
                                        "batch_norm", "softmax", "log_softmax", "cross_entropy",
                                        "scaled_dot_product_attention", "layer_norm"};
  for (Case& c : all) {
    if (c.name.find("specials") != std::string::npos) continue;
    if (std::find(ops.begin(), ops.end(), c.op) != ops.end()) keep.push_back(std::move(c));
  }
  return keep;
}

// A case's seed: FNV-1a of its name, so that adding a case changes no other case's inputs, and
// every mode draws the same values (rounded to its dtype).
uint64_t seed_of(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// One training step's forward and backward of a whole net of models/, to be held against its
// PyTorch twin (crosscheck/torch_nets.py) with the same weights: the inputs are the images, the
// labels and the model's state_dict (parameters, then buffers, in its order); the outputs the
// loss, the logits, the buffers after the step's forward (running statistics) and the logits in
// eval mode; the gradients those of the images and every parameter.
// Modes: models_fp32, models_autocast_bf16, models_autocast_fp16, and models_bf16, models_fp16:
// half parameters (Module::to, BatchNorm's kept fp32) and half images, no autocast.
void run_model_case(const std::string& net, const std::string& mode, std::optional<DType> autocast, DType params_dtype,
                    StateDict& out, json& manifest, int& failures) {
  const std::string key = mode + "/" + net;
  Generator gen(seed_of(net));
  std::shared_ptr<nn::Module> model = models::make_model(net, gen);
  model->to(params_dtype).to(g_device);
  Tensor x = draw(normal({8, 3, 32, 32}), params_dtype, gen);
  const Tensor targets = draw(labels({8}, 10), DType::F32, gen);
  std::vector<std::string> params;
  for (const auto& [name, t] : model->named_parameters()) params.push_back(name);
  const StateDict state = model->state_dict();
  json names = json::array(), inputs = json::array({{{"grad", true}}, {{"grad", false}}});
  std::vector<std::pair<std::string, Tensor>> buffers;
  out.emplace(key + "/in0", x.clone());
  out.emplace(key + "/in1", targets.clone());
  int i = 2;
  for (const auto& [name, t] : state) {
    const bool param = std::find(params.begin(), params.end(), name) != params.end();
    if (!param) buffers.emplace_back(name, t);
    names.push_back(name);
    inputs.push_back({{"grad", param}});
    out.emplace(key + "/in" + std::to_string(i++), t.detach().clone());
  }
  json entry = {{"key", key}, {"op", "model"}, {"mode", mode}, {"inputs", inputs},
                {"params", {{"model", net}, {"names", names}}}};
  try {
    x.requires_grad_();
    Tensor loss, logits;
    {
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(g_device.kind(), *autocast);
      logits = (*model)(x);
      loss = cross_entropy(logits, targets);
    }
    std::vector<Tensor> y = {loss.detach().clone(), logits.detach().clone()};
    for (const auto& [name, t] : buffers) y.push_back(t.detach().clone());
    // Scaled by 1024, as a GradScaler scales the loss, so that fp16's gradients do not flush to zero.
    const Tensor gy = (randn(loss.shape(), gen) * 1024.0).to(loss.dtype()).to(g_device);
    out.emplace(key + "/gy", gy);
    loss.backward(gy);
    model->eval();
    {
      NoGradGuard no_grad;
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(g_device.kind(), *autocast);
      y.push_back((*model)(x.detach()));
    }
    for (size_t k = 0; k < y.size(); ++k) out.emplace(key + "/out" + std::to_string(k), y[k]);
    entry["outputs"] = y.size();
    out.emplace(key + "/grad0", x.grad());
    i = 2;
    for (const auto& [name, t] : state) {
      if (inputs[i]["grad"] && t.grad().defined()) out.emplace(key + "/grad" + std::to_string(i), t.grad());
      ++i;
    }
  } catch (const std::exception& e) {
    entry["error"] = e.what();
    ++failures;
  }
  manifest.push_back(entry);
}

int run(const std::string& path) {
  StateDict out;
  json manifest = json::array();
  int failures = 0;
  struct Mode {
    std::string name;  // fp32, bf16, fp16, autocast_bf16, autocast_fp16, ..._half_inputs
    DType inputs;
    bool autocast;
    DType autocast_dtype;
  };
  const std::vector<Mode> modes = {{"optim", DType::F32, false, DType::F32},
                                   {"fp32", DType::F32, false, DType::F32},
                                   {"bf16", DType::BF16, false, DType::F32},
                                   {"fp16", DType::F16, false, DType::F32},
                                   {"autocast_bf16", DType::F32, true, DType::BF16},
                                   {"autocast_fp16", DType::F32, true, DType::F16},
                                   // half inputs inside an autocast region (a half activation
                                   // reaching softmax or a sum): demi's policy is PyTorch's CUDA one
                                   {"autocast_bf16_half_inputs", DType::BF16, true, DType::BF16},
                                   {"autocast_fp16_half_inputs", DType::F16, true, DType::F16}};
  for (const Mode& mode : modes) {
    const std::vector<Case> cases = mode.name == "optim" ? optim_cases() : mode.autocast ? autocast_cases() : dtype_cases();
    for (const Case& c : cases) {
      const std::string key = mode.name + "/" + c.name;
      Generator gen(seed_of(c.name));
      std::vector<Tensor> in;
      json entry = {{"key", key}, {"op", c.op}, {"params", c.params}, {"mode", mode.name}};
      json inputs = json::array();
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        Tensor t = draw(c.inputs[i], mode.inputs, gen);
        out.emplace(key + "/in" + std::to_string(i), t.clone());
        const bool grad = c.backward && c.inputs[i].grad;
        if (grad) t.requires_grad_();
        in.push_back(t);
        inputs.push_back({{"grad", grad}});
      }
      entry["inputs"] = inputs;
      try {
        std::vector<Tensor> y;
        {
          std::optional<amp::AutocastGuard> guard;
          if (mode.autocast) guard.emplace(g_device.kind(), mode.autocast_dtype);
          y = c.fn(in);
        }
        for (size_t i = 0; i < y.size(); ++i) out.emplace(key + "/out" + std::to_string(i), y[i].detach().clone());
        entry["outputs"] = y.size();
        if (c.backward) {
          const Tensor gy = randn(y[0].shape(), gen).to(y[0].dtype()).to(g_device);
          out.emplace(key + "/gy", gy);
          y[0].backward(gy);
          for (size_t i = 0; i < in.size(); ++i) {
            if (!inputs[i]["grad"]) continue;
            const Tensor g = in[i].grad();
            if (g.defined()) out.emplace(key + "/grad" + std::to_string(i), g);
            else inputs[i]["grad_missing"] = true;
          }
          entry["inputs"] = inputs;
        }
      } catch (const std::exception& e) {  // an error is a result too: compare.py reports it
        entry["error"] = e.what();
        ++failures;
      }
      manifest.push_back(entry);
    }
  }
  struct ModelMode {
    std::string name;
    std::optional<DType> autocast;
    DType params;
  };
  const std::vector<ModelMode> model_modes = {{"models_fp32", std::nullopt, DType::F32},
                                              {"models_autocast_bf16", DType::BF16, DType::F32},
                                              {"models_autocast_fp16", DType::F16, DType::F32},
                                              {"models_bf16", std::nullopt, DType::BF16},
                                              {"models_fp16", std::nullopt, DType::F16}};
  for (const ModelMode& m : model_modes) {
    for (const std::string net : {"SmallCNN", "AirNet", "cct4", "cct7"}) {
      run_model_case(net, m.name, m.autocast, m.params, out, manifest, failures);
    }
  }
  save_safetensors(path, out, {{"cases", manifest.dump()}});
  const std::string where =
      g_device.is_cpu()
          ? std::string("the CPU (") + backend::cpu_isa() + " kernels, bf16 route " + backend::cpu_bf16_route() + ")"
          : "CUDA";
  std::printf("crosscheck_ops: %zu cases on %s (%d raised an error) -> %s\n", manifest.size(), where.c_str(), failures,
              path.c_str());
  return 0;
}

}  // namespace
}  // namespace demi

int main(int argc, char** argv) {
  const std::string device = argc == 4 && std::string(argv[1]) == "--device" ? argv[2] : "cpu";
  if (!(argc == 2 || (argc == 4 && std::string(argv[1]) == "--device" && (device == "cpu" || device == "cuda")))) {
    std::fprintf(stderr, "usage: crosscheck_ops [--device cpu|cuda] OUT.safetensors\n");
    return 2;
  }
  try {
    if (device == "cuda") demi::g_device = demi::Device::cuda();
    return demi::run(argv[argc - 1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crosscheck_ops: %s\n", e.what());
    return 1;
  }
}

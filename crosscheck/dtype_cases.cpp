// crosscheck_ops' cases in fp32, bf16 and fp16 (the same cases, inputs rounded to each), one
// function per family, in the order the file lists them.
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "crosscheck/cases.h"

namespace demi::crosscheck {
namespace {

// The reductions' and the tensor ops' usual input: odd sizes, a tail in every dim.
const Shape kReductionShape{5, 67, 9};

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
void dropout_embedding_cases(const CaseList& add) {
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
void tensor_op_cases(const CaseList& add, const Shape& r) {
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
void layer_norm_cases(const CaseList& add) {
  auto ln = [&add](std::string name, Input x, Shape norm, int params, bool fp32_params, double eps) {
    std::vector<Input> in = {std::move(x)};
    for (int i = 0; i < params; ++i) in.push_back(fp32_params ? fp32_param(norm) : normal(norm));
    add(std::move(name), "layer_norm", {{"normalized_shape", norm}, {"eps", eps}}, std::move(in), one([=](auto& t) {
          const Tensor w = params > 0 ? t[1] : Tensor(), b = params > 1 ? t[2] : Tensor();
          return layer_norm(t[0], norm, w, b, eps);
        }));
  };
  ln("layer_norm", normal({16, 3, 37}), {37}, 2, false, 1e-5);
  ln("layer_norm_fp32_params", normal({16, 3, 37}), {37}, 2, true, 1e-5);
  ln("layer_norm_cct", normal({4, 64, 128}), {128}, 2, true, 1e-5);
  ln("layer_norm_two_dims", normal({4, 6, 10}), {6, 10}, 2, false, 1e-3);
  ln("layer_norm_weight_only", normal({9, 33}), {33}, 1, false, 1e-5);
  ln("layer_norm_no_affine", normal({9, 256}), {256}, 0, false, 1e-5);
  ln("layer_norm_large_mean", {{8, 256}, Draw::LargeMean}, {256}, 2, true, 1e-5);
}

// Element-wise: 67 x 37 (vector bodies and tails), broadcasting, the specials against each other,
// mixed dtypes; the unary functions; the comparisons.
void elementwise_cases(const CaseList& add) {
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
}

// Reductions (argmax among them) and the shape ops, on kReductionShape.
void reduction_and_shape_cases(const CaseList& add) {
  const Shape& r = kReductionShape;
  // Reductions.
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
}

// matmul and linear; the convolutions; the pools.
void product_cases(const CaseList& add) {
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
}

void batch_norm_cases(const CaseList& add) {
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
}

void softmax_and_loss_cases(const CaseList& add) {
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
}

void attention_cases(const CaseList& add) {
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
}

// channels_last inputs (params "channels_last": compare.py converts PyTorch's 4-D inputs likewise):
// the NHWC kernels where the device has them (CUDA), a contiguous copy elsewhere; the same values.
void channels_last_cases(const CaseList& add) {
  const auto nhwc = [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); };
  add("contiguous_channels_last", "contiguous", {{"memory_format", "channels_last"}}, {normal({2, 5, 4, 3})},
      one([nhwc](auto& x) { return nhwc(x[0]) * 2.0; }));
  add("conv2d_3x3_p1_bias_channels_last", "conv2d", {{"stride", 1}, {"padding", 1}, {"channels_last", true}},
      {normal({4, 8, 9, 11}), normal({12, 8, 3, 3}), normal({12})},
      one([nhwc](auto& x) { return conv2d(nhwc(x[0]), nhwc(x[1]), x[2], 1, 1); }));
  add("conv2d_1x1_s2_channels_last", "conv2d", {{"stride", 2}, {"padding", 0}, {"channels_last", true}},
      {normal({4, 16, 8, 8}), normal({24, 16, 1, 1})}, one([nhwc](auto& x) { return conv2d(nhwc(x[0]), x[1], Tensor(), 2, 0); }));
  const json k3 = {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"channels_last", true}};
  add("max_pool2d_k3_s2_p1_ties_channels_last", "max_pool2d", k3, {ties({2, 40, 9, 10})},
      one([nhwc](auto& x) { return max_pool2d(nhwc(x[0]), 3, 2, 1); }));
  add("avg_pool2d_k3_s2_p1_channels_last", "avg_pool2d", k3, {normal({2, 40, 9, 10})},
      one([nhwc](auto& x) { return avg_pool2d(nhwc(x[0]), 3, 2, 1); }));
  for (const bool training : {true, false}) {
    const json params = {{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}, {"activation", "none"},
                         {"channels_last", true}};
    add(training ? "batch_norm_train_channels_last" : "batch_norm_eval_channels_last", "batch_norm", params,
        {normal({8, 70, 5, 6}), fp32_state({70}, Draw::Normal), fp32_state({70}, Draw::Positive), fp32_param({70}),
         fp32_param({70})},
        [nhwc, training](const std::vector<Tensor>& t) {
          BatchNormOptions o;
          o.training = training;
          return std::vector<Tensor>{batch_norm(nhwc(t[0]), t[1], t[2], t[3], t[4], o), t[1], t[2]};
        });
  }
}

}  // namespace

std::vector<Case> dtype_cases() {
  std::vector<Case> c;
  const CaseList add{c};
  elementwise_cases(add);
  reduction_and_shape_cases(add);
  product_cases(add);
  batch_norm_cases(add);
  channels_last_cases(add);
  softmax_and_loss_cases(add);
  dropout_embedding_cases(add);
  tensor_op_cases(add, kReductionShape);
  attention_cases(add);
  layer_norm_cases(add);
  module_cases(add);
  return c;
}

}  // namespace demi::crosscheck

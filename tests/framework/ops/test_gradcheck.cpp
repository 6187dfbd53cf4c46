// Every differentiable op: analytic gradients against central finite differences in float64
// (relative error <= 1e-6), and forward results in float32 / float16 / bfloat16 against float64
// within each format's rounding error. The case table prints its name on failure.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "framework/ops/op.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

enum class Domain { Any, Positive, AwayFromZero, AwayFromBounds };

struct GradCase {
  std::string name;   // shown on failure
  std::string op;     // the op-table name it covers
  std::vector<Shape> shapes;
  Fn fn;
  Domain domain = Domain::Any;
};

void PrintTo(const GradCase& c, std::ostream* out) { *out << c.name; }

Tensor make_input(const Shape& shape, Domain domain, Generator& gen) {
  Tensor x = randn(shape, gen, DType::F64);
  if (domain == Domain::Positive) return exp(x * 0.3);  // in (0.3, 3) for 4 sigma
  if (domain == Domain::AwayFromBounds) {  // clamp's kinks at -0.5, 0.2 and 0.7: keep 0.05 away
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) {
      for (double bound : {-0.5, 0.2, 0.7}) {
        if (std::fabs(e - bound) < 0.05) e = bound + (e < bound ? -0.05 : 0.05);
      }
    }
    return tensor(v, shape, DType::F64);
  }
  if (domain == Domain::AwayFromZero) {
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) e = e >= 0 ? e + 0.5 : e - 0.5;
    return tensor(v, shape, DType::F64);
  }
  return x;
}

// A fixed uint8 mask of `shape`: 1 except at every third element.
Tensor pattern_mask(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 1 ? 0.0f : 1.0f;
  return tensor(v, shape, DType::U8);
}

std::vector<GradCase> cases() {
  const Tensor labels4 = tensor(std::vector<int64_t>{2, 0, 4, 1}, {4});
  const Tensor labels1 = tensor(std::vector<int64_t>{3}, {1});
  // act: 0 none, 1 relu, 2 gelu (fp64, as gradcheck runs, takes gelu(batch_norm) as two ops; the
  // low-precision comparison below runs the fused kernels)
  auto bn = [](bool training, bool affine, int act = 0) {
    return [training, affine, act](const std::vector<Tensor>& in) {
      const int64_t c = in[0].size(1);
      Generator g(3);
      const DType stat = in[0].dtype() == DType::F64 ? DType::F64 : DType::F32;
      const Tensor rm = (randn({c}, g, DType::F64) * 0.1).to(stat);
      const Tensor rv = exp(randn({c}, g, DType::F64) * 0.2).to(stat);
      BatchNormOptions o;
      o.training = training;
      const Tensor w = affine ? in[1] : Tensor(), b = affine ? in[2] : Tensor();
      if (act == 1) return batch_norm_relu(in[0], rm, rv, w, b, o);
      if (act == 2) return batch_norm_gelu(in[0], rm, rv, w, b, o);
      return batch_norm(in[0], rm, rv, w, b, o);
    };
  };
  return {
      {"add_same", "add", {{3, 4}, {3, 4}}, [](auto& in) { return in[0] + in[1]; }},
      {"add_broadcast_row", "add", {{3, 4}, {4}}, [](auto& in) { return in[0] + in[1]; }},
      {"add_broadcast_both", "add", {{2, 1, 3}, {1, 4, 1}}, [](auto& in) { return in[0] + in[1]; }},
      {"add_same_input_twice", "add", {{5}}, [](auto& in) { return in[0] + in[0]; }},
      {"sub_broadcast", "sub", {{2, 3, 4}, {3, 1}}, [](auto& in) { return in[0] - in[1]; }},
      {"mul_broadcast", "mul", {{2, 3, 4, 5}, {1, 3, 1, 1}}, [](auto& in) { return in[0] * in[1]; }},
      {"mul_square", "mul", {{7}}, [](auto& in) { return in[0] * in[0]; }},
      {"div_broadcast", "div", {{3, 4}, {4}}, [](auto& in) { return in[0] / in[1]; }, Domain::AwayFromZero},
      {"neg", "neg", {{2, 3}}, [](auto& in) { return -in[0]; }},
      {"affine_scalar_ops", "affine", {{4, 3}}, [](auto& in) { return (in[0] * 2.5 + 1.0) / 4.0 - 3.0; }},
      {"affine_rsub", "affine", {{6}}, [](auto& in) { return 1.0 - in[0]; }},
      {"scalar_div_by_tensor", "affine", {{6}}, [](auto& in) { return 3.0 / in[0]; }, Domain::AwayFromZero},
      {"exp", "exp", {{3, 5}}, [](auto& in) { return exp(in[0]); }},
      {"log", "log", {{3, 5}}, [](auto& in) { return log(in[0]); }, Domain::Positive},
      {"sqrt", "sqrt", {{3, 5}}, [](auto& in) { return sqrt(in[0]); }, Domain::Positive},
      {"pow_2.5", "pow", {{4, 2}}, [](auto& in) { return pow(in[0], 2.5); }, Domain::Positive},
      {"pow_-1", "pow", {{4, 2}}, [](auto& in) { return pow(in[0], -1.0); }, Domain::AwayFromZero},
      {"relu", "relu", {{4, 5}}, [](auto& in) { return relu(in[0]); }, Domain::AwayFromZero},
      {"gelu", "gelu", {{4, 5}}, [](auto& in) { return gelu(in[0]); }},
      {"sum_all", "sum", {{3, 4}}, [](auto& in) { return sum(in[0]); }},
      {"sum_dim1", "sum", {{3, 4, 2}}, [](auto& in) { return sum(in[0], {1}); }},
      {"sum_dims_keepdim", "sum", {{2, 3, 4}}, [](auto& in) { return sum(in[0], {0, 2}, true); }},
      {"mean_all", "mean", {{3, 4}}, [](auto& in) { return mean(in[0]); }},
      {"mean_hw", "mean", {{2, 3, 4, 5}}, [](auto& in) { return mean(in[0], {-2, -1}); }},
      {"reshape_flatten", "reshape", {{2, 3, 4}}, [](auto& in) { return in[0].reshape({4, -1}) * in[0].flatten().reshape({4, 6}); }},
      {"matmul_2d", "matmul", {{3, 4}, {4, 5}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_batch_1", "matmul", {{1, 1}, {1, 3}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_3d", "matmul", {{2, 3, 4}, {2, 4, 2}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_3d_2d", "matmul", {{2, 3, 4}, {4, 5}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"linear_bias", "linear", {{5, 4}, {3, 4}, {3}}, [](auto& in) { return linear(in[0], in[1], in[2]); }},
      {"linear_no_bias_3d", "linear", {{2, 3, 4}, {6, 4}}, [](auto& in) { return linear(in[0], in[1]); }},
      {"linear_batch_1", "linear", {{1, 7}, {2, 7}, {2}}, [](auto& in) { return linear(in[0], in[1], in[2]); }},
      {"conv2d_3x3_pad1_bias", "conv2d", {{2, 3, 5, 6}, {4, 3, 3, 3}, {4}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }},
      {"conv2d_stride2_nobias", "conv2d", {{1, 2, 7, 5}, {3, 2, 3, 3}},
       [](auto& in) { return conv2d(in[0], in[1], Tensor(), 2, 0); }},
      {"conv2d_1x1", "conv2d", {{2, 4, 3, 3}, {2, 4, 1, 1}}, [](auto& in) { return conv2d(in[0], in[1]); }},
      {"conv2d_5x5_pad2_stride2", "conv2d", {{1, 1, 6, 6}, {2, 1, 5, 5}, {2}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 2, 2); }},
      {"conv2d_2x2_stem", "conv2d", {{2, 3, 5, 5}, {4, 3, 2, 2}, {4}}, [](auto& in) { return conv2d(in[0], in[1], in[2]); }},
      {"max_pool2d_2", "max_pool2d", {{2, 3, 4, 6}}, [](auto& in) { return max_pool2d(in[0], 2); }},
      {"max_pool2d_3_s2_p1", "max_pool2d", {{1, 2, 5, 5}}, [](auto& in) { return max_pool2d(in[0], 3, 2, 1); }},
      {"global_max_pool2d", "max_pool2d", {{2, 3, 3, 3}}, [](auto& in) { return global_max_pool2d(in[0]); }},
      {"avg_pool2d_2", "avg_pool2d", {{2, 3, 4, 4}}, [](auto& in) { return avg_pool2d(in[0], 2); }},
      {"avg_pool2d_3_s1_p1", "avg_pool2d", {{1, 2, 4, 5}}, [](auto& in) { return avg_pool2d(in[0], 3, 1, 1); }},
      {"global_avg_pool2d", "avg_pool2d", {{2, 3, 4, 4}}, [](auto& in) { return global_avg_pool2d(in[0]); }},
      {"batch_norm_train_4d", "batch_norm", {{4, 3, 2, 3}, {3}, {3}}, bn(true, true)},
      {"batch_norm_train_2d", "batch_norm", {{5, 4}, {4}, {4}}, bn(true, true)},
      {"batch_norm_train_no_affine", "batch_norm", {{3, 2, 2, 2}}, bn(true, false)},
      {"batch_norm_eval", "batch_norm", {{2, 3, 2, 2}, {3}, {3}}, bn(false, true)},
      {"batch_norm_relu_train", "batch_norm_relu", {{4, 3, 2, 3}, {3}, {3}}, bn(true, true, 1)},
      {"batch_norm_relu_no_affine", "batch_norm_relu", {{3, 2, 2, 2}}, bn(true, false, 1)},
      {"batch_norm_relu_eval", "batch_norm", {{2, 3, 2, 2}, {3}, {3}}, bn(false, true, 1)},
      {"batch_norm_gelu_train", "batch_norm_gelu", {{4, 3, 2, 3}, {3}, {3}}, bn(true, true, 2)},
      {"batch_norm_gelu_no_affine", "batch_norm_gelu", {{3, 2, 2, 2}}, bn(true, false, 2)},
      {"batch_norm_gelu_eval", "batch_norm", {{2, 3, 2, 2}, {3}, {3}}, bn(false, true, 2)},
      {"softmax", "softmax", {{3, 5}}, [](auto& in) { return softmax(in[0]); }},
      {"softmax_3d", "softmax", {{2, 3, 4}}, [](auto& in) { return softmax(in[0], 2); }},
      {"log_softmax", "log_softmax", {{3, 5}}, [](auto& in) { return log_softmax(in[0]); }},
      {"cross_entropy", "cross_entropy", {{4, 5}}, [labels4](auto& in) { return cross_entropy(in[0], labels4); }},
      {"cross_entropy_smoothing", "cross_entropy", {{4, 5}},
       [labels4](auto& in) { return cross_entropy(in[0], labels4, {0.2}); }},
      {"cross_entropy_batch_1", "cross_entropy", {{1, 10}}, [labels1](auto& in) { return cross_entropy(in[0], labels1); }},
      {"transpose_2d", "transpose", {{3, 5}}, [](auto& in) { return in[0].t(); }},
      {"transpose_middle_dims", "transpose", {{2, 3, 4, 5}}, [](auto& in) { return transpose(in[0], 1, -1); }},
      {"clamp_both", "clamp", {{4, 6}}, [](auto& in) { return clamp(in[0], -0.5, 0.7); }, Domain::AwayFromBounds},
      {"clamp_min_only", "clamp", {{3, 5}}, [](auto& in) { return in[0].clamp(0.2); }, Domain::AwayFromBounds},
      {"select_row", "select", {{4, 3, 2}}, [](auto& in) { return in[0][2] * in[0][-1]; }},
      {"cat_dim0", "cat", {{2, 3}, {4, 3}}, [](auto& in) { return cat({in[0], in[1]}, 0); }},
      {"cat_dim1_three", "cat", {{2, 1, 3}, {2, 4, 3}, {2, 2, 3}},
       [](auto& in) { return cat({in[0], in[1], in[2]}, 1); }},
      {"cat_same_input_twice", "cat", {{3, 2}}, [](auto& in) { return cat({in[0], in[0]}, -1); }},
      // A fresh generator each call: the same mask for every evaluation of the loss.
      {"dropout", "dropout", {{6, 7}}, [](auto& in) { Generator g(7); return dropout(in[0], 0.4, true, g); }},
      {"embedding_duplicates", "embedding", {{5, 3}},
       [ids = tensor(std::vector<int64_t>{4, 0, 4, 2, 4, 0}, {2, 3})](auto& in) { return embedding(in[0], ids); }},
      {"sdpa", "scaled_dot_product_attention", {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }},
      {"sdpa_additive_mask_broadcast", "scaled_dot_product_attention",
       {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 2}, {2, 1, 3, 5}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], in[3], false, 0.7); }},
      {"sdpa_bool_mask", "scaled_dot_product_attention", {{1, 2, 4, 3}, {1, 2, 6, 3}, {1, 2, 6, 5}},
       [](auto& in) {
         const Tensor keep = tensor({1, 1, 0, 1, 0, 1}, {6}, DType::U8);
         return scaled_dot_product_attention(in[0], in[1], in[2], keep);
       }},
      {"sdpa_causal", "scaled_dot_product_attention", {{3, 5, 2}, {3, 4, 2}, {3, 4, 3}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), true); }},
      {"layer_norm_last_dim", "layer_norm", {{4, 3, 6}, {6}, {6}},
       [](auto& in) { return layer_norm(in[0], {6}, in[1], in[2]); }},
      {"layer_norm_two_dims", "layer_norm", {{2, 3, 5}, {3, 5}, {3, 5}},
       [](auto& in) { return layer_norm(in[0], {3, 5}, in[1], in[2], 1e-3); }},
      {"layer_norm_weight_only", "layer_norm", {{3, 8}, {8}}, [](auto& in) { return layer_norm(in[0], {8}, in[1]); }},
      {"layer_norm_no_affine", "layer_norm", {{5, 7}}, [](auto& in) { return layer_norm(in[0], {7}); }},
      // channels_last beside row-major operands: a per-channel [C, 1, 1] one read as it is, a
      // [3, 4, 1] one converted, gradients summed back in NHWC order.
      {"contiguous_channels_last", "contiguous", {{2, 3, 4, 5}, {3, 1, 1}, {2, 1, 4, 5}, {3, 4, 1}},
       [](auto& in) {
         const Tensor x = in[0].contiguous(MemoryFormat::ChannelsLast);
         return gelu(x * in[1] - in[2]) + x.pow(2.0) * in[3];
       }},
      {"contiguous_back_to_rows", "contiguous", {{2, 3, 2, 2}},
       [](auto& in) { return in[0].contiguous(MemoryFormat::ChannelsLast).contiguous().reshape({2, 12}); }},
  };
}

// The selections, extremes and layout ops transformer code uses, and matmul's broadcast batches.
std::vector<GradCase> selection_and_layout_cases() {
  return {
      {"abs", "abs", {{4, 5}}, [](auto& in) { return abs(in[0]); }, Domain::AwayFromZero},
      {"max_all", "amax", {{3, 4}}, [](auto& in) { return max(in[0]); }},
      {"min_all", "amin", {{7}}, [](auto& in) { return in[0].min(); }},
      {"amax_dims", "amax", {{2, 3, 4}}, [](auto& in) { return amax(in[0], {0, 2}); }},
      {"amin_dim_keepdim", "amin", {{3, 4}}, [](auto& in) { return amin(in[0], {-1}, true); }},
      {"max_dim", "max_dim", {{3, 4, 2}}, [](auto& in) { return std::get<0>(max(in[0], 1)); }},
      {"min_dim_keepdim", "min_dim", {{3, 4}}, [](auto& in) { return std::get<0>(in[0].min(0, true)); }},
      {"where_broadcast", "where", {{3, 4}, {4}},
       [](auto& in) { return where(pattern_mask({2, 1, 4}), in[0], in[1]); }},
      {"where_scalar", "where", {{2, 3}}, [](auto& in) { return where(pattern_mask({3}), 0.5, in[0]); }},
      {"masked_fill", "where", {{2, 3}}, [](auto& in) { return masked_fill(in[0], pattern_mask({2, 1}), -1.0); }},
      {"permute", "permute", {{2, 3, 4}}, [](auto& in) { return permute(in[0], {2, 0, 1}); }},
      {"unsqueeze_squeeze", "reshape", {{3, 1, 4}},
       [](auto& in) { return squeeze(in[0]).unsqueeze(0) * in[0].squeeze(1); }},
      {"expand", "expand", {{3, 1}}, [](auto& in) { return expand(in[0], {2, 3, 4}); }},
      {"expand_keep", "expand", {{1, 4}}, [](auto& in) { return in[0].expand({3, -1}); }},
      {"matmul_broadcast_batch", "matmul", {{2, 1, 3, 4}, {3, 4, 2}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_shared_first", "matmul", {{3, 4}, {2, 4, 5}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_4d", "matmul", {{2, 2, 3, 4}, {2, 2, 4, 3}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_vector_matrix", "matmul", {{4}, {2, 4, 3}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_matrix_vector", "matmul", {{3, 4}, {4}}, [](auto& in) { return matmul(in[0], in[1]); }},
      {"matmul_dot", "matmul", {{5}, {5}}, [](auto& in) { return matmul(in[0], in[1]); }},
  };
}

std::vector<GradCase> all_cases() {
  std::vector<GradCase> all = cases(), more = selection_and_layout_cases();
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

std::string case_name(const testing::TestParamInfo<GradCase>& info) {
  std::string s = info.param.name;
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

class GradCheck : public testing::TestWithParam<GradCase> {};

// loss = sum(f(inputs) * w) for fixed random w, so every output element contributes.
double weighted_loss(const GradCase& c, const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  return sum(c.fn(inputs).to(DType::F64) * w).item<double>();
}

TEST_P(GradCheck, AnalyticMatchesCentralDifferencesInF64) {
  const GradCase& c = GetParam();
  Generator gen(42);
  std::vector<Tensor> inputs;
  for (const Shape& s : c.shapes) inputs.push_back(make_input(s, c.domain, gen).requires_grad_());
  const Tensor out = c.fn(inputs);
  const Tensor w = randn(out.shape(), gen, DType::F64);
  sum(out.to(DType::F64) * w).backward();

  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(c.name + ": input " + std::to_string(i));
    ASSERT_TRUE(inputs[i].grad().defined());
    ASSERT_EQ(inputs[i].grad().shape(), inputs[i].shape());
    const std::vector<double> analytic = inputs[i].grad().to_vector<double>();
    double* x = inputs[i].data<double>();
    double max_err = 0.0, max_ref = 0.0;
    for (size_t j = 0; j < analytic.size(); ++j) {
      const double saved = x[j];
      x[j] = saved + h;
      const double plus = weighted_loss(c, inputs, w);
      x[j] = saved - h;
      const double minus = weighted_loss(c, inputs, w);
      x[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - analytic[j]));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LE(max_err / std::max(max_ref, 1e-12), 1e-6) << "max |analytic - numeric| = " << max_err
                                                        << ", max |numeric| = " << max_ref;
  }
}

// Forward in each lower precision vs float64 on the same (rounded) inputs: the half types round
// once after fp32 accumulation, so the error is within a few units of their epsilon.
TEST_P(GradCheck, LowerPrecisionForwardMatchesF64) {
  const GradCase& c = GetParam();
  const std::pair<DType, double> formats[] = {
      {DType::F32, 1e-5}, {DType::F16, 2 * std::ldexp(1.0, -10)}, {DType::BF16, 2 * std::ldexp(1.0, -7)}};
  for (const auto& [dtype, rtol] : formats) {
    SCOPED_TRACE(c.name + " in " + dtype_name(dtype));
    Generator gen(42);
    std::vector<Tensor> low, ref;
    for (const Shape& s : c.shapes) {
      const Tensor x = make_input(s, c.domain, gen).to(dtype);
      low.push_back(x);
      ref.push_back(x.to(DType::F64));  // exactly the rounded values
    }
    NoGradGuard no_grad;
    // normalisation parameters stay fp32 for half inputs
    if ((c.op == "batch_norm" || c.op == "batch_norm_relu" || c.op == "batch_norm_gelu") && dtype != DType::F32) {
      for (size_t i = 1; i < low.size(); ++i) low[i] = low[i].to(DType::F32);
    }
    const std::vector<double> expected = c.fn(ref).to_vector<double>();
    const Tensor out = c.fn(low);
    const std::vector<double> actual = out.to_vector<double>();
    ASSERT_EQ(actual.size(), expected.size());
    double scale = 1.0;
    for (double e : expected) scale = std::max(scale, std::abs(e));
    for (size_t j = 0; j < expected.size(); ++j) {
      EXPECT_LE(std::abs(actual[j] - expected[j]), rtol * (std::abs(expected[j]) + scale))
          << "element " << j << ": got " << actual[j] << ", float64 gives " << expected[j];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, testing::ValuesIn(all_cases()), case_name);

TEST(GradCheckCoverage, EveryOpInTheOpTableHasAGradcheckCase) {
  std::set<std::string> covered;
  for (const GradCase& c : all_cases()) covered.insert(c.op);
  // Checked elsewhere, by exact comparison: a cast's gradient is the incoming gradient rounded to
  // the source dtype (CastGradient below); to_device needs two devices (tests/backends/cuda).
  covered.insert("cast");
  covered.insert("to_device");
  for (const ops::OpInfo& op : ops::all_ops()) EXPECT_TRUE(covered.count(op.name)) << op.name << " has no gradcheck case";
}

TEST(CastGradient, ReturnsInSourceDtypeRoundedExactly) {
  Generator gen(1);
  Tensor x = randn({6}, gen, DType::F64).requires_grad_();
  const Tensor w = randn({6}, gen, DType::F64);
  sum(x.to(DType::F16).to(DType::F32) * w.to(DType::F32)).backward();
  ASSERT_EQ(x.grad().dtype(), DType::F64);
  const std::vector<double> g = x.grad().to_vector<double>();
  const std::vector<float> w32 = w.to(DType::F32).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    // through the fp16 cast the gradient is rounded to fp16 on its way back
    EXPECT_EQ(g[i], static_cast<double>(static_cast<float>(Half(w32[i]))));
  }
}

}  // namespace
}  // namespace demi

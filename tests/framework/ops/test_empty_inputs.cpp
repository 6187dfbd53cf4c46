// The ops of the op table on inputs with a dimension of 0, forward and backward, in fp32 and
// under bf16 autocast (to_device aside): PyTorch's shapes and values (an empty result, zero
// gradients for the parameters, untouched running statistics), never a crash. The first GPU run
// found a division by H * W = 0 in the CPU's batch norm; this sweeps the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "framework/demi/demi.h"

namespace demi {
namespace {

struct EmptyCase {
  std::string name;
  std::vector<Shape> shapes;  // the first is the data, with a 0; the others are parameters
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  Shape want;  // the output's shape
  float last_grad = 0.0f;  // every element of the last input's gradient (a bias that still counts)
};

std::vector<EmptyCase> cases() {
  auto bn = [](int act) {  // 0 none, 1 relu, 2 gelu
    return [act](const std::vector<Tensor>& in) {
      BatchNormOptions o;
      o.training = true;
      const Tensor rm = zeros({3}) + 0.25, rv = zeros({3}) + 2.0;
      const Tensor y = act == 1   ? batch_norm_relu(in[0], rm, rv, in[1], in[2], o)
                       : act == 2 ? batch_norm_gelu(in[0], rm, rv, in[1], in[2], o)
                                  : batch_norm(in[0], rm, rv, in[1], in[2], o);
      EXPECT_EQ(rm.to_vector<float>(), std::vector<float>(3, 0.25f)) << "running mean changed";
      EXPECT_EQ(rv.to_vector<float>(), std::vector<float>(3, 2.0f)) << "running var changed";
      return y;
    };
  };
  return {
      {"add", {{0, 5}, {5}}, [](auto& in) { return in[0] + in[1]; }, {0, 5}},
      {"sub", {{0, 5}, {5}}, [](auto& in) { return in[0] - in[1]; }, {0, 5}},
      {"mul", {{4, 0}, {4, 1}}, [](auto& in) { return in[0] * in[1]; }, {4, 0}},
      {"div", {{0, 5}, {5}}, [](auto& in) { return in[0] / in[1]; }, {0, 5}},
      {"neg, exp, log, sqrt, pow", {{0, 5}},
       [](auto& in) { return pow(sqrt(log(exp(-in[0]) + 1.0)), 3.0); }, {0, 5}},
      {"clamp", {{0, 5}}, [](auto& in) { return clamp(in[0], -1.0, 1.0); }, {0, 5}},
      {"cast", {{0, 5}}, [](auto& in) { return in[0].to(DType::F64).to(DType::F32); }, {0, 5}},
      {"cat", {{0, 5}, {0, 5}}, [](auto& in) { return cat({in[0], in[1]}, 1); }, {0, 10}},
      {"reshape, transpose", {{0, 6}}, [](auto& in) { return transpose(in[0].reshape({0, 2, 3}), 1, 2); }, {0, 3, 2}},
      {"select", {{3, 0}}, [](auto& in) { return select(in[0], 0, 1); }, {0}},
      {"mean over a non-empty dim", {{0, 5}}, [](auto& in) { return mean(in[0], {1}); }, {0}},
      {"relu", {{0, 3, 4, 4}}, [](auto& in) { return relu(in[0]); }, {0, 3, 4, 4}},
      {"gelu", {{2, 0}}, [](auto& in) { return gelu(in[0]); }, {2, 0}},
      {"sum", {{0, 5}}, [](auto& in) { return sum(in[0], {0}); }, {5}},
      {"matmul", {{0, 6}, {6, 4}}, [](auto& in) { return matmul(in[0], in[1]); }, {0, 4}},
      {"linear (no rows)", {{0, 6}, {4, 6}, {4}}, [](auto& in) { return linear(in[0], in[1], in[2]); }, {0, 4}},
      // No features: the bias alone, so its gradient counts the rows.
      {"linear (no features)", {{3, 0}, {4, 0}, {4}}, [](auto& in) { return linear(in[0], in[1], in[2]); }, {3, 4},
       3.0f},
      {"conv2d (no images)", {{0, 3, 8, 8}, {5, 3, 3, 3}, {5}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }, {0, 5, 8, 8}},
      {"conv2d (no rows, padded)", {{2, 3, 0, 8}, {5, 3, 1, 3}, {5}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }, {2, 5, 2, 8}, 32.0f},
      {"conv2d (no output channels)", {{2, 3, 8, 8}, {0, 3, 3, 3}, {0}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }, {2, 0, 8, 8}},
      {"conv2d (no input channels)", {{2, 0, 8, 8}, {5, 0, 3, 3}, {5}},
       [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); }, {2, 5, 8, 8}, 128.0f},
      {"max_pool2d", {{0, 3, 8, 8}}, [](auto& in) { return max_pool2d(in[0], 2); }, {0, 3, 4, 4}},
      {"avg_pool2d", {{0, 3, 8, 8}}, [](auto& in) { return avg_pool2d(in[0], 2); }, {0, 3, 4, 4}},
      {"batch_norm (no images)", {{0, 3, 4, 4}, {3}, {3}}, bn(0), {0, 3, 4, 4}},
      {"batch_norm (no rows)", {{2, 3, 0, 4}, {3}, {3}}, bn(0), {2, 3, 0, 4}},
      {"batch_norm_relu (no images)", {{0, 3, 4, 4}, {3}, {3}}, bn(1), {0, 3, 4, 4}},
      {"batch_norm_gelu (no images)", {{0, 3, 4, 4}, {3}, {3}}, bn(2), {0, 3, 4, 4}},
      {"softmax", {{0, 10}}, [](auto& in) { return softmax(in[0]); }, {0, 10}},
      {"log_softmax", {{0, 10}}, [](auto& in) { return log_softmax(in[0]); }, {0, 10}},
      {"dropout", {{0, 5}}, [](auto& in) { return dropout(in[0], 0.5); }, {0, 5}},
      // No indices: the weight's gradient is zero.
      {"embedding (no indices)", {{5, 3}},
       [](auto& in) { return embedding(in[0], tensor(std::vector<int64_t>{}, {0, 2})); }, {0, 2, 3}},
      {"embedding (no columns)", {{5, 0}},
       [](auto& in) { return embedding(in[0], tensor(std::vector<int64_t>{4, 0}, {2})); }, {2, 0}},
      {"scaled_dot_product_attention (no batch)", {{0, 2, 4, 3}, {0, 2, 5, 3}, {0, 2, 5, 2}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }, {0, 2, 4, 2}},
      {"scaled_dot_product_attention (no keys)", {{2, 4, 3}, {2, 0, 3}, {2, 0, 5}},
       [](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }, {2, 4, 5}},
      {"layer_norm (no rows)", {{0, 5}, {5}, {5}}, [](auto& in) { return layer_norm(in[0], {5}, in[1], in[2]); }, {0, 5}},
      {"layer_norm (no columns)", {{3, 0}, {0}, {0}}, [](auto& in) { return layer_norm(in[0], {0}, in[1], in[2]); },
       {3, 0}},
  };
}

TEST(EmptyInputs, EveryOpGivesAnEmptyResultAndZeroParameterGradients) {
  for (const bool autocast_bf16 : {false, true}) {
    for (const EmptyCase& c : cases()) {
      SCOPED_TRACE(c.name + (autocast_bf16 ? " under bf16 autocast" : " in fp32"));
      Generator gen(3);
      std::vector<Tensor> in;
      for (const Shape& s : c.shapes) in.push_back(randn(s, gen).requires_grad_());
      Tensor y;
      {
        amp::AutocastGuard guard(Device::Kind::CPU, DType::BF16, autocast_bf16);
        y = c.fn(in);
      }
      EXPECT_EQ(y.shape(), c.want);
      y.sum().to(DType::F32).backward();
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_TRUE(in[i].grad().defined()) << "input " << i << " got no gradient";
        EXPECT_EQ(in[i].grad().shape(), in[i].shape()) << "input " << i;
        for (const float g : in[i].grad().to(DType::F32).to_vector<float>()) {
          // The output's gradient is all ones, so a parameter's is what the empty sum leaves: 0,
          // except a bias over outputs that exist (last_grad: how many it adds to).
          const float want = i + 1 == in.size() && i > 0 ? c.last_grad : 0.0f;
          EXPECT_EQ(g, want) << "input " << i;
        }
      }
    }
  }
}

TEST(EmptyInputs, ReductionsOfNothing) {
  EXPECT_EQ(sum(zeros({0, 3})).item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(mean(zeros({0, 3})).item<float>()));  // PyTorch: nan
  const Tensor logits = zeros({0, 10}), target = tensor(std::vector<int64_t>{}, {0}, DType::I64);
  EXPECT_TRUE(std::isnan(cross_entropy(logits, target).item<float>()));  // PyTorch: nan for a mean of nothing
}

}  // namespace
}  // namespace demi

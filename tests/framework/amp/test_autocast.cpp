// Autocast: the output dtype of every op in the table under fp16 and bf16, eligibility (F64 and
// integer tensors untouched), nesting, the parameter cast cache and gradients in source dtypes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "framework/amp/autocast.h"
#include "framework/demi/demi.h"
#include "framework/ops/op.h"

namespace demi {
namespace {

using amp::AutocastGuard;
using amp::Category;

// One call per op in the table, on fp32 inputs.
std::map<std::string, std::function<Tensor()>> op_calls() {
  static Generator gen(0);
  const Tensor x = randn({2, 3, 4, 4}, gen), v = randn({4, 5}, gen), w = randn({5, 5}, gen);
  const Tensor labels = tensor(std::vector<int64_t>{1, 0, 4, 2}, {4});
  return {
      {"add", [=] { return v + v; }},
      {"sub", [=] { return v - v; }},
      {"mul", [=] { return v * v; }},
      {"div", [=] { return v / w.slice(0, 4); }},
      {"neg", [=] { return -v; }},
      {"affine", [=] { return v * 2.0; }},
      {"exp", [=] { return exp(v); }},
      {"log", [=] { return log(exp(v)); }},
      {"sqrt", [=] { return sqrt(exp(v)); }},
      {"pow", [=] { return pow(v, 2.0); }},
      {"relu", [=] { return relu(v); }},
      {"gelu", [=] { return gelu(v); }},
      {"sum", [=] { return sum(v); }},
      {"mean", [=] { return mean(v, {1}); }},
      {"reshape", [=] { return v.reshape({5, 4}); }},
      {"cast", [=] { return v.to(DType::F64); }},
      {"to_device", [=] { return v.to(Device::cpu()); }},
      {"matmul", [=] { return matmul(v, w); }},
      {"linear", [=] { return linear(v, w, w.slice(0, 1).reshape({5})); }},
      {"conv2d", [=] { return conv2d(x, randn({2, 3, 3, 3}, gen)); }},
      {"max_pool2d", [=] { return max_pool2d(x, 2); }},
      {"avg_pool2d", [=] { return avg_pool2d(x, 2); }},
      {"batch_norm", [=] { return batch_norm(x, Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }},
      {"batch_norm_relu", [=] { return batch_norm_relu(x, Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }},
      {"batch_norm_gelu", [=] { return batch_norm_gelu(x, Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }},
      {"softmax", [=] { return softmax(v); }},
      {"log_softmax", [=] { return log_softmax(v); }},
      {"cross_entropy", [=] { return cross_entropy(v, labels); }},
      {"transpose", [=] { return v.t(); }},
      {"clamp", [=] { return clamp(v, 0.0, 1.0); }},
      {"select", [=] { return v[1]; }},
      {"cat", [=] { return cat({v, w}); }},
      {"dropout", [=] { return dropout(v, 0.5); }},
      {"embedding", [=] { return embedding(w, labels); }},
      {"abs", [=] { return abs(v); }},
      {"amax", [=] { return amax(v, {1}); }},
      {"amin", [=] { return min(v); }},
      {"max_dim", [=] { return std::get<0>(max(v, 1)); }},
      {"min_dim", [=] { return std::get<0>(min(v, 0, true)); }},
      {"where", [=] { return where(v > 0.0, v, w.slice(0, 4)); }},
      {"permute", [=] { return permute(x, {0, 2, 3, 1}); }},
      {"expand", [=] { return expand(v.reshape({4, 1, 5}), {4, 3, 5}); }},
      {"scaled_dot_product_attention", [=] { return scaled_dot_product_attention(x, x, x); }},
      {"layer_norm", [=] { return layer_norm(v, {5}, ones({5}), zeros({5})); }},
      {"contiguous", [=] { return x.contiguous(MemoryFormat::ChannelsLast); }},
  };
}

TEST(Autocast, OutputDtypeOfEveryOpInTheTable) {
  const auto calls = op_calls();
  for (DType lower : {DType::F16, DType::BF16}) {
    AutocastGuard guard(Device::Kind::CPU, lower);
    for (const ops::OpInfo& op : ops::all_ops()) {
      SCOPED_TRACE(std::string(op.name) + " under " + dtype_name(lower));
      auto it = calls.find(op.name);
      ASSERT_NE(it, calls.end()) << "no autocast case for " << op.name;
      const Tensor y = it->second();
      DType expected = DType::F32;  // fp32 inputs: Promote and Unchanged keep fp32
      if (op.category == Category::LowerPrecision) expected = lower;
      if (std::string(op.name) == "cast") expected = DType::F64;  // an explicit dtype is obeyed
      EXPECT_EQ(y.dtype(), expected) << "category " << op.category;
    }
  }
}

TEST(Autocast, CategoriesFollowPyTorchsLists) {
  EXPECT_EQ(amp::autocast_category("conv2d"), Category::LowerPrecision);
  EXPECT_EQ(amp::autocast_category("linear"), Category::LowerPrecision);
  EXPECT_EQ(amp::autocast_category("matmul"), Category::LowerPrecision);
  for (const char* op : {"softmax", "log_softmax", "cross_entropy", "exp", "log", "pow", "sum", "mean"})
    EXPECT_EQ(amp::autocast_category(op), Category::Fp32) << op;
  for (const char* op : {"add", "sub", "mul", "div"}) EXPECT_EQ(amp::autocast_category(op), Category::Promote) << op;
  for (const char* op : {"batch_norm", "batch_norm_relu", "batch_norm_gelu", "relu", "gelu", "max_pool2d", "avg_pool2d"})
    EXPECT_EQ(amp::autocast_category(op), Category::Unchanged) << op;
  for (const char* op : {"dropout", "embedding"}) EXPECT_EQ(amp::autocast_category(op), Category::Unchanged) << op;
  for (const char* op : {"abs", "amax", "amin", "max_dim", "min_dim", "permute", "expand", "contiguous"})
    EXPECT_EQ(amp::autocast_category(op), Category::Unchanged) << op;
  EXPECT_EQ(amp::autocast_category("where"), Category::Promote);  // two floating values: the wider
  EXPECT_EQ(amp::autocast_category("layer_norm"), Category::Fp32);
  EXPECT_THROW(amp::autocast_category("conv3d"), Error);
  EXPECT_THAT(amp::policy_table(), testing::HasSubstr("conv2d          lower_precision  bfloat16        float16"));
}

TEST(Autocast, HalfInputsToFp32OpsComeOutFp32AndPromoteWidens) {
  AutocastGuard guard(Device::Kind::CPU, DType::F16);
  const Tensor h = ones({3}, DType::F16), f = ones({3});
  EXPECT_EQ(softmax(h).dtype(), DType::F32);
  EXPECT_EQ(sum(h).dtype(), DType::F32);
  EXPECT_EQ((h + f).dtype(), DType::F32);
  EXPECT_EQ((h * h).dtype(), DType::F16);
  EXPECT_EQ(relu(h).dtype(), DType::F16);
  EXPECT_EQ((h + ones({3}, DType::BF16)).dtype(), DType::F32);
}

// A half activation meeting an fp32 weight is the normal case after the first layer: the dtype
// checks must see the inputs after autocast cast them (a bug once rejected this).
TEST(Autocast, HalfActivationMeetsFp32WeightInGemmOps) {
  AutocastGuard guard(Device::Kind::CPU, DType::F16);
  const Tensor h = ones({2, 3, 4, 4}, DType::F16);
  EXPECT_EQ(conv2d(h, ones({2, 3, 3, 3}), ones({2})).dtype(), DType::F16);
  EXPECT_EQ(linear(ones({2, 3}, DType::BF16), ones({4, 3}), ones({4})).dtype(), DType::F16);
  EXPECT_EQ(matmul(ones({2, 3}, DType::F16), ones({3, 2})).dtype(), DType::F16);
}

TEST(Autocast, BatchNormOfHalfInputWithFp32ParametersReturnsHalf) {
  AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  nn::BatchNorm2d bn({3});
  const Tensor y = bn(randn({2, 3, 4, 4}).to(DType::BF16));
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_EQ(bn.running_mean.dtype(), DType::F32);
}

TEST(Autocast, OnlyFloatingNonF64TensorsOnTheGuardsDeviceAreCast) {
  AutocastGuard guard(Device::Kind::CPU, DType::F16);
  const Tensor d = ones({2, 2}, DType::F64);
  EXPECT_EQ(matmul(d, d).dtype(), DType::F64);
  {
    AutocastGuard cuda_only(Device::Kind::CUDA, DType::F16);
    AutocastGuard cpu_off(Device::Kind::CPU, DType::F16, false);
    EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), DType::F32);  // CPU tensors: not this guard's device
  }
}

TEST(Autocast, NestedDisableAndRestore) {
  EXPECT_FALSE(amp::is_autocast_enabled(Device::Kind::CPU));
  {
    AutocastGuard outer(Device::Kind::CPU, DType::F16);
    EXPECT_TRUE(amp::is_autocast_enabled(Device::Kind::CPU));
    {
      AutocastGuard inner(Device::Kind::CPU, DType::F16, false);
      EXPECT_FALSE(amp::is_autocast_enabled(Device::Kind::CPU));
      EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), DType::F32);
      {
        AutocastGuard bf16(Device::Kind::CPU, DType::BF16);
        EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), DType::BF16);
      }
      EXPECT_FALSE(amp::is_autocast_enabled(Device::Kind::CPU));
    }
    EXPECT_TRUE(amp::is_autocast_enabled(Device::Kind::CPU));
    EXPECT_EQ(amp::autocast_dtype(Device::Kind::CPU), DType::F16);
    EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), DType::F16);
  }
  EXPECT_FALSE(amp::is_autocast_enabled(Device::Kind::CPU));
}

TEST(Autocast, ParameterCastIsCachedForTheOutermostRegion) {
  nn::Linear fc(4, 4);
  const Tensor x = randn({2, 4});
  {
    AutocastGuard outer(Device::Kind::CPU, DType::F16);
    fc(x);
    EXPECT_EQ(amp::cast_cache_size(), 2u);  // weight and bias
    fc(x);
    {
      AutocastGuard inner(Device::Kind::CPU, DType::F16);
      fc(x);
    }
    EXPECT_EQ(amp::cast_cache_size(), 2u);  // still one cast each after three calls
  }
  EXPECT_EQ(amp::cast_cache_size(), 0u);  // cleared when the outermost guard exits
  {
    AutocastGuard guard(Device::Kind::CPU, DType::F16);
    NoGradGuard no_grad;
    fc(x);
    EXPECT_EQ(amp::cast_cache_size(), 0u);  // nothing cached under no_grad
  }
}

TEST(Autocast, Fp32LeavesGetFp32GradsAndActivationsAreSavedInHalf) {
  nn::Linear fc(64, 32);
  const Tensor x = randn({16, 64});
  const int64_t base = autograd::saved_tensor_stats().current_bytes;
  Tensor loss;
  {
    AutocastGuard guard(Device::Kind::CPU, DType::F16);
    const Tensor h = relu(fc(x));
    EXPECT_EQ(h.dtype(), DType::F16);
    // linear saves x as fp16 for grad_weight (not the weight: x needs no gradient), relu saves
    // its fp16 output
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - base, (16 * 64 + 16 * 32) * 2);
    loss = mean(h);
  }
  loss.backward();
  EXPECT_EQ(fc.weight.grad().dtype(), DType::F32);
  EXPECT_EQ(fc.bias.grad().dtype(), DType::F32);
}

}  // namespace
}  // namespace demi

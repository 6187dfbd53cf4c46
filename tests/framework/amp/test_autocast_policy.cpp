// The autocast policy as users meet it: every function of the functional API (read from
// framework/ops/ops.h, so a new function without a case here fails) follows the row of the op it
// runs, for fp32 and for half inputs; and demi's deliberate differences from PyTorch's CPU autocast
// (docs/amp.md, "Autocast on the CPU") are pinned one by one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "framework/amp/autocast.h"
#include "framework/demi/demi.h"

namespace demi {
namespace {

using amp::AutocastGuard;
using amp::Category;

struct FunctionCase {
  std::string row;                    // the op of amp::policy_table() whose rule applies ("": none)
  std::function<Tensor(DType)> call;  // the function on floating inputs of this dtype
  std::optional<DType> fixed = {};    // functions without a row: their result's dtype, always
};

// One case per function of ops.h. Parameters that stay fp32 in a model (batch-norm affine and
// running statistics) stay fp32 here too.
std::map<std::string, FunctionCase> function_cases() {
  Generator gen(0);
  const Tensor x = randn({2, 3, 4, 4}, gen), v = randn({4, 5}, gen), w = randn({5, 5}, gen);
  const Tensor filters = randn({2, 3, 3, 3}, gen), labels = tensor(std::vector<int64_t>{1, 0, 4, 2}, {4});
  return {
      {"add", {"add", [=](DType t) { return add(v.to(t), v.to(t)); }}},
      {"sub", {"sub", [=](DType t) { return sub(v.to(t), v.to(t)); }}},
      {"mul", {"mul", [=](DType t) { return mul(v.to(t), v.to(t)); }}},
      {"div", {"div", [=](DType t) { return div(v.to(t), exp(v).to(t)); }}},
      {"neg", {"neg", [=](DType t) { return neg(v.to(t)); }}},
      {"affine", {"affine", [=](DType t) { return affine(v.to(t), 2.0, 1.0); }}},
      {"exp", {"exp", [=](DType t) { return exp(v.to(t)); }}},
      {"log", {"log", [=](DType t) { return log(exp(v).to(t)); }}},
      {"sqrt", {"sqrt", [=](DType t) { return sqrt(exp(v).to(t)); }}},
      {"pow", {"pow", [=](DType t) { return pow(v.to(t), 2.0); }}},
      {"relu", {"relu", [=](DType t) { return relu(v.to(t)); }}},
      {"gelu", {"gelu", [=](DType t) { return gelu(v.to(t)); }}},
      {"sum", {"sum", [=](DType t) { return sum(v.to(t)); }}},
      {"mean", {"mean", [=](DType t) { return mean(v.to(t), {1}); }}},
      {"matmul", {"matmul", [=](DType t) { return matmul(v.to(t), w.to(t)); }}},
      {"linear", {"linear", [=](DType t) { return linear(v.to(t), w.to(t), w.slice(0, 1).reshape({5}).to(t)); }}},
      {"conv2d", {"conv2d", [=](DType t) { return conv2d(x.to(t), filters.to(t)); }}},
      {"max_pool2d", {"max_pool2d", [=](DType t) { return max_pool2d(x.to(t), 2); }}},
      {"avg_pool2d", {"avg_pool2d", [=](DType t) { return avg_pool2d(x.to(t), 2); }}},
      {"global_avg_pool2d", {"avg_pool2d", [=](DType t) { return global_avg_pool2d(x.to(t)); }}},
      {"global_max_pool2d", {"max_pool2d", [=](DType t) { return global_max_pool2d(x.to(t)); }}},
      {"batch_norm",
       {"batch_norm", [=](DType t) { return batch_norm(x.to(t), Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }}},
      {"batch_norm_relu",
       {"batch_norm_relu",
        [=](DType t) { return batch_norm_relu(x.to(t), Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }}},
      {"batch_norm_gelu",
       {"batch_norm_gelu",
        [=](DType t) { return batch_norm_gelu(x.to(t), Tensor(), Tensor(), ones({3}), zeros({3}), {true}); }}},
      {"softmax", {"softmax", [=](DType t) { return softmax(v.to(t)); }}},
      {"log_softmax", {"log_softmax", [=](DType t) { return log_softmax(v.to(t)); }}},
      {"cross_entropy", {"cross_entropy", [=](DType t) { return cross_entropy(v.to(t), labels); }}},
      {"clamp", {"clamp", [=](DType t) { return clamp(v.to(t), -0.5, 0.5); }}},
      {"transpose", {"transpose", [=](DType t) { return transpose(x.to(t), 1, 3); }}},
      {"select", {"select", [=](DType t) { return select(x.to(t), 0, 1); }}},
      {"cat", {"cat", [=](DType t) { return cat({v.to(t), w.to(t)}, 0); }}},
      {"dropout", {"dropout", [=](DType t) { Generator g(1); return dropout(v.to(t), 0.5, true, g); }}},
      {"embedding", {"embedding", [=](DType t) { return embedding(w.to(t), labels); }}},
      {"scaled_dot_product_attention",
       {"scaled_dot_product_attention", [=](DType t) { return scaled_dot_product_attention(x.to(t), x.to(t), x.to(t)); }}},
      {"layer_norm", {"layer_norm", [=](DType t) { return layer_norm(v.to(t), {5}, ones({5}), zeros({5})); }}},
      // Not differentiable, no row: masks are uint8 and indices int64 whatever autocast does.
      {"eq", {"", [=](DType t) { return eq(v.to(t), w.slice(0, 4).to(t)); }, DType::U8}},
      {"ne", {"", [=](DType t) { return ne(v.to(t), 0.5); }, DType::U8}},
      {"isfinite", {"", [=](DType t) { return isfinite(v.to(t)); }, DType::U8}},
      {"isnan", {"", [=](DType t) { return isnan(v.to(t)); }, DType::U8}},
      {"isinf", {"", [=](DType t) { return isinf(v.to(t)); }, DType::U8}},
      {"lt", {"", [=](DType t) { return lt(v.to(t), w.slice(0, 4).to(t)); }, DType::U8}},
      {"le", {"", [=](DType t) { return le(v.to(t), 0.5); }, DType::U8}},
      {"gt", {"", [=](DType t) { return gt(v.to(t), w.slice(0, 4).to(t)); }, DType::U8}},
      {"ge", {"", [=](DType t) { return ge(v.to(t), 0.5); }, DType::U8}},
      {"argmax", {"", [=](DType t) { return argmax(v.to(t), 1); }, DType::I64}},
      {"abs", {"abs", [=](DType t) { return abs(v.to(t)); }}},
      {"max", {"amax", [=](DType t) { return max(v.to(t)); }}},
      {"min", {"amin", [=](DType t) { return min(v.to(t)); }}},
      {"amax", {"amax", [=](DType t) { return amax(v.to(t), {0}); }}},
      {"amin", {"amin", [=](DType t) { return amin(v.to(t), {-1}, true); }}},
      {"argmin", {"", [=](DType t) { return argmin(v.to(t), 1); }, DType::I64}},
      {"where", {"where", [=](DType t) { return where(v > 0.0, v.to(t), w.slice(0, 4).to(t)); }}},
      {"masked_fill", {"where", [=](DType t) { return masked_fill(v.to(t), v < 0.0, 0.0); }}},
      {"permute", {"permute", [=](DType t) { return permute(x.to(t), {3, 2, 1, 0}); }}},
      {"unsqueeze", {"reshape", [=](DType t) { return unsqueeze(v.to(t), -1); }}},
      {"squeeze", {"reshape", [=](DType t) { return squeeze(v.reshape({4, 1, 5}).to(t)); }}},
      {"expand", {"expand", [=](DType t) { return expand(v.to(t), {2, 4, 5}); }}},
  };
}

// The names ops.h declares as `Tensor name(` (operators are covered by add/sub/mul/div).
std::set<std::string> declared_functions() {
  std::ifstream in(DEMI_OPS_HEADER);
  EXPECT_TRUE(in.good()) << "cannot read " << DEMI_OPS_HEADER;
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  std::set<std::string> names;
  // A scan rather than std::regex: GCC 12's <regex> trips -Wmaybe-uninitialized under ASan.
  const std::string prefix = "\nTensor ";
  for (size_t at = source.find(prefix); at != std::string::npos; at = source.find(prefix, at + 1)) {
    size_t end = at + prefix.size();
    while (end < source.size() && (std::islower(static_cast<unsigned char>(source[end])) ||
                                   std::isdigit(static_cast<unsigned char>(source[end])) || source[end] == '_')) {
      ++end;
    }
    if (end > at + prefix.size() && end < source.size() && source[end] == '(') {
      names.insert(source.substr(at + prefix.size(), end - at - prefix.size()));
    }
  }
  return names;
}

// What the row's category makes of inputs of dtype `in` under autocast to `lower`.
DType expected_dtype(Category category, DType in, DType lower) {
  switch (category) {
    case Category::LowerPrecision: return lower;
    case Category::Fp32: return DType::F32;
    case Category::Promote:
    case Category::Unchanged: return in;  // every floating input of a case has dtype `in`
  }
  return in;
}

TEST(AutocastPolicy, EveryFunctionOfTheFunctionalApiHasACase) {
  const auto cases = function_cases();
  const std::set<std::string> declared = declared_functions();
  ASSERT_GT(declared.size(), 20u) << "the declaration pattern no longer matches ops.h";
  for (const std::string& name : declared) {
    EXPECT_TRUE(cases.count(name)) << "framework/ops/ops.h declares " << name
                                   << "() but no case here checks its autocast behaviour; add one";
  }
  for (const auto& [name, c] : cases) {
    EXPECT_TRUE(declared.count(name)) << name << " has a case but ops.h does not declare it";
    if (c.fixed) continue;
    EXPECT_NO_THROW(amp::autocast_category(c.row)) << name << ": no row '" << c.row << "' in the policy table";
  }
}

TEST(AutocastPolicy, EveryFunctionFollowsItsRowForFp32AndHalfInputs) {
  const auto cases = function_cases();
  for (DType lower : {DType::BF16, DType::F16}) {
    for (DType in : {DType::F32, DType::BF16, DType::F16}) {
      AutocastGuard guard(Device::Kind::CPU, lower);
      for (const auto& [name, c] : cases) {
        if (c.fixed) {
          EXPECT_EQ(c.call(in).dtype(), *c.fixed) << name << " on " << dtype_name(in);
          continue;
        }
        const Category category = amp::autocast_category(c.row);
        EXPECT_EQ(c.call(in).dtype(), expected_dtype(category, in, lower))
            << name << " (row " << c.row << ", " << category << ") on " << dtype_name(in) << " inputs under "
            << dtype_name(lower) << " autocast";
      }
    }
  }
}

TEST(AutocastPolicy, PoolingKeepsAHalfInputsDtype) {
  AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  const Tensor x = randn({2, 3, 4, 4}).to(DType::BF16);
  EXPECT_EQ(global_avg_pool2d(x).dtype(), DType::BF16);
  EXPECT_EQ(nn::GlobalAvgPool2d()(x).dtype(), DType::BF16);
  EXPECT_EQ(nn::GlobalMaxPool2d()(x).dtype(), DType::BF16);
  // and still averages: each plane's mean, rounded once to bf16
  const std::vector<float> pooled = global_avg_pool2d(x).to_vector<float>();
  const std::vector<float> means = mean(x.to(DType::F32), {2, 3}).to(DType::BF16).to_vector<float>();
  EXPECT_EQ(pooled, means);
}

// demi's CPU autocast uses the same lists as its CUDA autocast (PyTorch's CUDA lists), where
// PyTorch's CPU autocast leaves these ops in bf16: one model, one numerics, on either device.
TEST(AutocastPolicy, CpuAutocastWidensTheOpsPyTorchsCudaListWidens) {
  AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  const Tensor h = randn({4, 5}).to(DType::BF16);
  for (const auto& [name, y] : std::map<std::string, Tensor>{{"exp", exp(h)},
                                                              {"log", log(exp(h))},
                                                              {"pow", pow(h, 2.0)},
                                                              {"sum", sum(h)},
                                                              {"mean", mean(h)},
                                                              {"softmax", softmax(h)},
                                                              {"log_softmax", log_softmax(h)}}) {
    EXPECT_EQ(y.dtype(), DType::F32) << name;
  }
}

TEST(AutocastPolicy, LossesAreFp32EvenOutsideAutocast) {
  const Tensor logits = randn({4, 5}).to(DType::BF16), labels = tensor(std::vector<int64_t>{1, 0, 4, 2}, {4});
  EXPECT_EQ(cross_entropy(logits, labels).dtype(), DType::F32);  // PyTorch: bfloat16
  EXPECT_EQ(cross_entropy(logits.to(DType::F16), labels).dtype(), DType::F32);
}

// PyTorch's type promotion: a 0-d tensor counts like a Python scalar and does not widen a tensor
// with dimensions; two of a kind promote as usual. The same inside autocast (add/mul promote).
TEST(AutocastPolicy, ZeroDimTensorsDoNotWidenTensorsWithDimensions) {
  const Tensor h = ones({3}, DType::BF16), f = ones({3});
  const Tensor f0 = full({}, 2.0), h0 = full({}, 2.0, DType::BF16), d0 = full({}, 2.0, DType::F64);
  for (bool autocast : {false, true}) {
    AutocastGuard guard(Device::Kind::CPU, DType::BF16, autocast);
    SCOPED_TRACE(autocast ? "under autocast" : "outside autocast");
    EXPECT_EQ((h * f0).dtype(), DType::BF16);
    EXPECT_EQ((f0 + h).dtype(), DType::BF16);
    EXPECT_EQ((h / d0).dtype(), DType::BF16);
    EXPECT_EQ((f * h0).dtype(), DType::F32);
    EXPECT_EQ((h0 * f0).dtype(), DType::F32);  // both 0-d: the wider
    EXPECT_EQ((h * f).dtype(), DType::F32);    // both with dimensions: the wider
    EXPECT_EQ((h * ones({1})).dtype(), DType::F32);  // shape [1] has a dimension
  }
  // the value is computed in the result type: 3 * 2 in bf16
  EXPECT_EQ((ones({1}, DType::BF16) * full({}, 3.0) * f0).to_vector<float>(), std::vector<float>{6.0f});
  // and the gradient of the 0-d operand comes back in its own dtype
  Tensor s = full({}, 2.0).requires_grad_();
  sum(h * s).backward();
  EXPECT_EQ(s.grad().dtype(), DType::F32);
  EXPECT_EQ(s.grad().item<float>(), 3.0f);
}

// layer_norm runs in fp32 under autocast on both devices (PyTorch's CUDA list); PyTorch's CPU
// autocast leaves it out, so there a bf16 input gives a bf16 output (docs/amp.md).
TEST(AutocastPolicy, LayerNormRunsInFp32OnTheCpuToo) {
  AutocastGuard guard(Device::Kind::CPU, DType::BF16);
  const Tensor h = randn({4, 5}).to(DType::BF16);
  EXPECT_EQ(layer_norm(h, {5}).dtype(), DType::F32);
  EXPECT_EQ(nn::LayerNorm(5)(h).dtype(), DType::F32);
}

}  // namespace
}  // namespace demi

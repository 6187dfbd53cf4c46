// Poisoned inputs never reach the weights: a NaN or inf in a batch makes training::TrainStep skip the
// update, through the GradScaler under fp16 (counted as a skipped step) and by itself in fp32 and
// bf16, where nothing else would catch it. Bad labels, shapes and dtypes at the public API are
// demi::Error naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Net {
  Generator gen{3};
  nn::Sequential seq;
  Net() {
    seq.emplace<nn::Linear>(nn::Linear::Options{8, 16}, gen).emplace<nn::ReLU>().emplace<nn::Linear>(
        nn::Linear::Options{16, 4}, gen);
  }
  std::vector<std::vector<float>> weights() {
    std::vector<std::vector<float>> w;
    for (const Tensor& p : seq.parameters()) w.push_back(p.to_vector<float>());
    return w;
  }
};

Tensor batch_with(float poison, Generator& gen) {
  std::vector<float> x = randn({6, 8}, gen).to_vector<float>();
  x[13] = poison;
  return tensor(x, {6, 8});
}

void expect_poisoned_step_is_skipped(DType dtype, float poison) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " with " + std::to_string(poison));
  Net net;
  optim::SGD::Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD opt(net.seq.parameters(), o);
  amp::GradScaler::Options so;
  so.enabled = dtype == DType::F16;
  amp::GradScaler scaler(so);
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, dtype, 0.0, 1});
  const Tensor labels = tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1}, {6});

  const auto clean = step.run([&](int) { return cross_entropy(net.seq(batch_with(0.5f, net.gen)), labels); });
  EXPECT_TRUE(clean.stepped());
  EXPECT_FALSE(clean.had_non_finite_loss());
  const auto before = net.weights();
  const auto poisoned = step.run([&](int) { return cross_entropy(net.seq(batch_with(poison, net.gen)), labels); });
  EXPECT_TRUE(poisoned.had_non_finite_loss());
  EXPECT_FALSE(poisoned.stepped());
  EXPECT_EQ(net.weights(), before) << "the poisoned batch changed the weights";
  if (scaler.is_enabled()) {
    EXPECT_EQ(scaler.steps_skipped(), 1);
  }
  // Training goes on normally afterwards.
  const auto after = step.run([&](int) { return cross_entropy(net.seq(batch_with(0.5f, net.gen)), labels); });
  EXPECT_TRUE(after.stepped());
  for (const auto& w : net.weights()) {
    for (float v : w) {
      ASSERT_TRUE(std::isfinite(v));
    }
  }
}

TEST(PoisonedInputs, NanOrInfInABatchSkipsTheUpdateInEveryPrecision) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    expect_poisoned_step_is_skipped(dtype, std::numeric_limits<float>::quiet_NaN());
    expect_poisoned_step_is_skipped(dtype, std::numeric_limits<float>::infinity());
  }
}

TEST(PoisonedInputs, BadLabelsShapesAndDtypesAreErrors) {
  Generator gen(1);
  const Tensor logits = randn({4, 10}, gen);
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 10, 2}, {4})); }),
              HasSubstr("target[2] = 10 is out of range for 10"));
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<int64_t>{0, -1, 1, 2}, {4})); }),
              HasSubstr("target[1] = -1 is out of range"));
  // PyTorch's ignore_index (-100) and its other target forms get a message that says they are absent.
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2, -100}, {4})); }),
              HasSubstr("target[3] = -100 is out of range for 10 classes; labels must be in [0, 10) (demi's "
                        "cross_entropy has no ignore_index"));
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2, 10}, {4})); }),
              Not(HasSubstr("ignore_index")));
  EXPECT_THAT(test::error_of([&] { cross_entropy(randn({2, 10, 4, 4}, gen), zeros({2, 4, 4}, DType::I64)); }),
              HasSubstr("per-position losses (logits [N, C, d1, ...]) are not supported: move the classes last"));
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, zeros({4, 10})); }),
              HasSubstr("class-probability targets (a floating target shaped like the logits, [4, 10]) are not "
                        "supported; pass int64 class indices [4]"));
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2}, {3})); }),
              HasSubstr("cross_entropy: target must be [4"));
  EXPECT_THAT(test::error_of([&] { cross_entropy(logits, tensor(std::vector<float>{0, 1, 2, 3}, {4})); }),
              HasSubstr("target must hold int64 class indices"));
  nn::Conv2d conv({3, 8, 3}, gen);
  EXPECT_THAT(test::error_of([&] { conv(randn({2, 4, 8, 8}, gen)); }), HasSubstr("conv2d: input [2, 4, 8, 8] has 4"));
  nn::Linear fc({16, 4}, gen);
  EXPECT_THAT(test::error_of([&] { fc(randn({2, 15}, gen)); }), HasSubstr("linear: input of shape [2, 15]"));
  EXPECT_THAT(test::error_of([&] { fc(randn({2, 15}, gen)); }), Not(HasSubstr("Flatten")));
  EXPECT_THAT(test::error_of([&] { fc(randn({2, 16, 1, 1}, gen)); }),
              HasSubstr("has 1 features but weight [4, 16] expects 16; its dims after the first hold that many: "
                        "add an nn::Flatten"));
}

}  // namespace
}  // namespace demi

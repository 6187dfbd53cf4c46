// memory_report(): bytes by category measured on real training steps, and the arithmetic that
// projects them (a 100M-parameter fp32 model with AdamW: 400 MB + 400 MB + 800 MB).
#include <gtest/gtest.h>

#include <iostream>

#include "framework/demi/demi.h"

namespace demi {
namespace {

int64_t current(MemoryCategory c) { return memory_report()[c].current; }

TEST(MemoryReport, Fp32ModelWithAdamWMatchesTheEstimate) {
  nn::Linear fc(1000, 1000);
  const int64_t n = 1000 * 1000 + 1000;
  EXPECT_EQ(current(MemoryCategory::Parameters), 4 * n);
  optim::AdamW opt(fc.parameters(), {});
  const Tensor x = randn({64, 1000});
  const Tensor loss = mean(relu(fc(x)));
  EXPECT_GT(current(MemoryCategory::SavedActivations), 0);
  loss.backward();
  EXPECT_EQ(current(MemoryCategory::SavedActivations), 0);  // backward freed them
  opt.step();
  const TrainingMemoryEstimate e = estimate_training_memory(n, DType::F32, 2, false);
  EXPECT_EQ(current(MemoryCategory::Parameters), e.parameters);
  EXPECT_EQ(current(MemoryCategory::Gradients), e.gradients);
  EXPECT_EQ(current(MemoryCategory::OptimizerState), e.optimizer_state);
  EXPECT_EQ(current(MemoryCategory::MasterWeights), 0);
  std::cout << memory_report().str();
}

TEST(MemoryReport, HalfModelWithMastersMatchesTheEstimate) {
  nn::Linear fc(500, 400);
  const int64_t n = 500 * 400 + 400;
  fc.to(DType::F16);
  reset_peak_memory_stats(Device::cpu());
  EXPECT_EQ(current(MemoryCategory::Parameters), 2 * n);
  optim::SGD::Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD opt(fc.parameters(), o);
  amp::GradScaler scaler;
  scaler.scale(mean(fc(randn({8, 500}).to(DType::F16)).to(DType::F32))).backward();
  scaler.step(opt);
  ASSERT_FALSE(scaler.last_step_skipped());
  scaler.update();
  const TrainingMemoryEstimate e = estimate_training_memory(n, DType::F16, 1, true);
  EXPECT_EQ(current(MemoryCategory::Parameters), e.parameters);
  // The half gradients and their fp32 unscaled copies both live while unscale_ runs; after it the
  // fp32 ones are p.grad() and the half ones are freed.
  EXPECT_EQ(memory_report()[MemoryCategory::Gradients].peak, e.gradients);
  EXPECT_EQ(current(MemoryCategory::Gradients), 4 * n);
  EXPECT_EQ(current(MemoryCategory::OptimizerState), e.optimizer_state);
  EXPECT_EQ(current(MemoryCategory::MasterWeights), e.master_weights);
}

TEST(MemoryReport, ProjectionFor100MParametersWithAdamW) {
  const TrainingMemoryEstimate e = estimate_training_memory(100'000'000, DType::F32, 2, false);
  EXPECT_EQ(e.parameters, 400'000'000);
  EXPECT_EQ(e.gradients, 400'000'000);
  EXPECT_EQ(e.optimizer_state, 800'000'000);
  EXPECT_EQ(e.master_weights, 0);
  // the same model with fp16 weights and fp32 masters: weights halve, masters add them back
  const TrainingMemoryEstimate h = estimate_training_memory(100'000'000, DType::F16, 2, true);
  EXPECT_EQ(h.parameters, 200'000'000);
  EXPECT_EQ(h.master_weights, 400'000'000);
}

}  // namespace
}  // namespace demi

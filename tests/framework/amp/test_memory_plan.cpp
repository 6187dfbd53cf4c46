// The memory planner's arithmetic, exactly, without allocating what it plans: 100M parameters with
// AdamW in fp32 are 1.6 GB of parameter-related state; bf16 weights with fp32 masters save nothing
// on it (fp16 with a GradScaler costs more); bf16 weights without masters (stochastic rounding) save
// a quarter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

TEST(MemoryPlan, HundredMillionParametersWithAdamW) {
  amp::MemoryPlanOptions adamw;
  adamw.optimizer_state_tensors = 2;
  const amp::MemoryPlan fp32 = amp::plan_state_memory(100'000'000, DType::F32, adamw);
  EXPECT_EQ(fp32.parameters, 400'000'000);
  EXPECT_EQ(fp32.gradients, 400'000'000);
  EXPECT_EQ(fp32.optimizer_state, 800'000'000);
  EXPECT_EQ(fp32.master_weights, 0);
  EXPECT_EQ(fp32.total(), 1'600'000'000);

  // bf16 weights with fp32 masters: 2 + 2 + 8 + 4 bytes a parameter: 1.6 GB again, nothing saved
  const amp::MemoryPlan masters = amp::plan_state_memory(100'000'000, DType::BF16, adamw);
  EXPECT_EQ(masters.parameters, 200'000'000);
  EXPECT_EQ(masters.gradients, 200'000'000);
  EXPECT_EQ(masters.master_weights, 400'000'000);
  EXPECT_EQ(masters.total(), 1'600'000'000);

  // fp16 weights with masters and a GradScaler: the fp32 unscaled gradients add 4 bytes: 2.0 GB
  amp::MemoryPlanOptions scaled = adamw;
  scaled.loss_scaling = true;
  const amp::MemoryPlan fp16 = amp::plan_state_memory(100'000'000, DType::F16, scaled);
  EXPECT_EQ(fp16.gradients, 600'000'000);
  EXPECT_EQ(fp16.total(), 2'000'000'000);

  // bf16 weights without masters (stochastic rounding): 2 + 2 + 8 bytes a parameter
  adamw.masters = optim::MasterWeights::None;
  const amp::MemoryPlan none = amp::plan_state_memory(100'000'000, DType::BF16, adamw);
  EXPECT_EQ(none.master_weights, 0);
  EXPECT_EQ(none.total(), 1'200'000'000);
}

TEST(MemoryPlan, SgdAndLookahead) {
  amp::MemoryPlanOptions o;
  o.optimizer_state_tensors = 0;  // plain SGD keeps nothing
  EXPECT_EQ(amp::plan_state_memory(1000, DType::F32, o).optimizer_state, 0);
  o.optimizer_state_tensors = 1;
  o.lookahead = true;  // the momentum buffer and lookahead's fp32 average
  EXPECT_EQ(amp::plan_state_memory(1000, DType::F16, o).optimizer_state, 8000);
  o.optimizer_state_tensors = -1;
  EXPECT_THAT(test::error_of([&] { amp::plan_state_memory(1000, DType::F32, o); }),
              testing::HasSubstr("optimizer_state_tensors must be >= 0"));
}

}  // namespace
}  // namespace demi

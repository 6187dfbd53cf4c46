// LR schedules: values against PyTorch's formulas, and skipped steps counted without fuss.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/demi/demi.h"

namespace demi {
namespace {

optim::SGD make_sgd(Tensor& w, double lr) {
  optim::SGD::Options o;
  o.lr = lr;
  return optim::SGD({w}, o);
}

TEST(LRScheduler, StepLRDecaysEveryStepSize) {
  Tensor w = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 0.1);
  optim::StepLR sched(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 7; ++i) {
    lrs.push_back(opt.lr(0));
    sched.step();
  }
  const std::vector<double> expected = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
  for (size_t i = 0; i < lrs.size(); ++i) EXPECT_DOUBLE_EQ(lrs[i], expected[i]) << i;
}

TEST(LRScheduler, CosineWithWarmupRisesLinearlyThenDecays) {
  Tensor w = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 1.0);
  optim::CosineWithWarmup sched(opt, 3, 13);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.25);
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.5);
  sched.step();
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 1.0);  // warm-up done
  for (int i = 0; i < 5; ++i) sched.step();
  EXPECT_NEAR(opt.lr(0), 0.5, 1e-12);  // half way through the cosine
  for (int i = 0; i < 20; ++i) sched.step();
  EXPECT_NEAR(opt.lr(0), 0.0, 1e-12);  // held at the floor
}

TEST(LRScheduler, PiecewiseLinearInterpolatesLikeNumpyInterp) {
  // airbench's schedule over 100 steps: np.interp(t, [0, 23, 100], [0.2, 1, 0.07]), per group.
  Tensor w = ones({1}).requires_grad_(), b = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 2.0);
  optim::SGD::Options bias_options;
  bias_options.lr = 128.0;
  opt.add_param_group({b}, bias_options);
  optim::PiecewiseLinear sched(opt, {{0, 0.2}, {23, 1.0}, {100, 0.07}});
  std::vector<double> factors;
  for (int i = 0; i <= 110; ++i) {
    factors.push_back(opt.lr(0) / 2.0);
    EXPECT_DOUBLE_EQ(opt.lr(1) / 128.0, factors.back()) << i;  // every group follows its own base lr
    sched.step();
  }
  EXPECT_DOUBLE_EQ(factors[0], 0.2);
  EXPECT_NEAR(factors[10], 0.2 + 0.8 * 10.0 / 23.0, 1e-12);
  EXPECT_DOUBLE_EQ(factors[23], 1.0);
  EXPECT_NEAR(factors[50], 1.0 - 0.93 * 27.0 / 77.0, 1e-12);
  EXPECT_NEAR(factors[100], 0.07, 1e-12);
  EXPECT_NEAR(factors[110], 0.07, 1e-12);  // held past the last point
}

TEST(LRScheduler, PiecewiseLinearRejectsUnorderedPoints) {
  Tensor w = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 1.0);
  EXPECT_THROW(optim::PiecewiseLinear(opt, {{0, 1.0}, {10, 0.5}, {10, 0.1}}), Error);
  EXPECT_THROW(optim::PiecewiseLinear(opt, {}), Error);
}

TEST(LRScheduler, OneCycleMatchesTorchOneCycleLR) {
  // torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1, total_steps=10): 0.04 at the start, 1.0 at
  // step 2 (pct_start * total - 1), 4e-6 at step 9.
  Tensor w = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 1.0);
  optim::OneCycle sched(opt, 10);
  EXPECT_NEAR(opt.lr(0), 0.04, 1e-12);
  sched.step();
  EXPECT_NEAR(opt.lr(0), 0.52, 1e-12);
  sched.step();
  EXPECT_NEAR(opt.lr(0), 1.0, 1e-12);
  for (int i = 0; i < 7; ++i) sched.step();
  EXPECT_NEAR(opt.lr(0), 4e-6, 1e-12);
}

TEST(LRScheduler, OneCycleCyclesMomentumAsTorchOneCycleLR) {
  // torch.optim.SGD([w], lr=0.1, momentum=0.9 or 0) with OneCycleLR(opt, max_lr=0.1, total_steps=10)
  // (PyTorch 2.15): group["momentum"] per step, whatever the optimizer's own momentum was.
  const std::vector<double> want = {0.95,       0.9,        0.85,       0.85495156, 0.86882551,
                                    0.88887395, 0.91112605, 0.93117449, 0.94504844, 0.95};
  for (double own : {0.9, 0.0}) {
    Tensor w = ones({1}).requires_grad_();
    optim::SGD::Options o;
    o.lr = 0.1, o.momentum = own;
    optim::SGD opt({w}, o);
    optim::OneCycle sched(opt, 10);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(opt.momentum(0), want[i], 1e-8) << "step " << i << ", own momentum " << own;
      sched.step();
    }
  }
  // AdamW's beta1 follows the same cycle (PyTorch: betas[0] = 0.95 at the start).
  Tensor w = ones({1}).requires_grad_();
  optim::AdamW adam({w}, 0.1);
  optim::OneCycle sched(adam, 10);
  EXPECT_DOUBLE_EQ(adam.momentum(0), 0.95);
  // cycle_momentum=False leaves it alone.
  optim::SGD::Options o;
  o.lr = 0.1, o.momentum = 0.9;
  optim::SGD fixed({w}, o);
  optim::OneCycle lr_only(fixed, 10, 0.3, 25.0, 1e4, optim::OneCycle::Momentum{false});
  for (int i = 0; i < 5; ++i) lr_only.step();
  EXPECT_DOUBLE_EQ(fixed.momentum(0), 0.9);
}

TEST(LRScheduler, SkippedStepsAreCountedAndTheScheduleKeepsItsPace) {
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Tensor w = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 0.1);
  optim::StepLR sched(opt, 2, 0.5);
  amp::GradScaler scaler;
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, 0.0, 1}, &sched);
  // the first iteration overflows in fp16 (gradient 2 * 65536), as a real fp16 run's first steps do
  const auto r = step.run([&](int) { return sum(w.to(DType::F16) * 2.0); });
  EXPECT_FALSE(r.stepped());
  EXPECT_EQ(scaler.steps_skipped(), 1);
  EXPECT_EQ(sched.iteration(), 1);
  step.run([&](int) { return sum(w.to(DType::F16) * 2.0); });
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);  // iterations, skipped or not, drive the schedule
  set_warning_handler(previous);
  EXPECT_TRUE(warnings.empty());
}

TEST(LRScheduler, LambdaLRAndAGroupWithItsOwnFactor) {
  // A schedule decaying to 0 over 10 steps; group 1 (airbench's whitening bias) over 4 only.
  Tensor w = ones({1}).requires_grad_(), b = ones({1}).requires_grad_();
  auto opt = make_sgd(w, 0.5);
  optim::SGD::Options bias_options;
  bias_options.lr = 3.0;
  opt.add_param_group({b}, bias_options);
  optim::LambdaLR sched(opt, [](int64_t t) { return 1.0 - static_cast<double>(t) / 10.0; });
  sched.set_group_factor(1, [](int64_t t) { return std::max(0.0, 1.0 - static_cast<double>(t) / 4.0); });
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.5);
  EXPECT_DOUBLE_EQ(opt.lr(1), 3.0);
  for (int i = 0; i < 6; ++i) sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.5 * 0.4);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.0);
  EXPECT_THROW(sched.set_group_factor(2, [](int64_t) { return 1.0; }), Error);
}

}  // namespace
}  // namespace demi

// The run's components, each built by its factory from a TrainerConfig alone (no CIFAR-10): the
// model as the recipe initialises it, the optimizer --optimizer names over the recipe's groups, the
// GradScaler --loss-scale asks for, every --schedule, lookahead's decay, and all of them together.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "models/models.h"
#include "support/error_of.h"
#include "train/components.h"

namespace demi {
namespace {

using train::ScheduleKind;

// An SGD over one parameter at lr 1, for reading a schedule's factors off its lr.
struct UnitLr {
  Tensor w = zeros({2});
  optim::SGD opt{std::vector<Tensor>{w.requires_grad_()}, 1.0};
  std::vector<train::ParamGroup> groups = one_group(w);

  static std::vector<train::ParamGroup> one_group(const Tensor& p) {
    train::ParamGroup g;
    g.params = {p};
    return {g};
  }
};

// The lr of group `group` after `steps` steps of `schedule`.
double lr_after(optim::LRScheduler& schedule, optim::Optimizer& opt, int64_t steps, size_t group = 0) {
  for (int64_t i = 0; i < steps; ++i) schedule.step();
  return opt.lr(group);
}

TEST(Components, StepCountsHaveAtLeastTwoSteps) {
  train::TrainerConfig c;
  c.epochs = 3;
  EXPECT_EQ(train::step_counts(c, 10).per_epoch, 10);
  EXPECT_EQ(train::step_counts(c, 10).total, 30);
  c.epochs = 1;
  EXPECT_EQ(train::step_counts(c, 1).total, 2);  // so that every schedule has two points
}

TEST(Components, TheModelIsSeededByTheConfigAndHalfParamsKeepBatchNormInFp32) {
  train::TrainerConfig c;
  const auto a = train::make_model(c, Device::cpu(), nullptr)->state_dict();
  const auto b = train::make_model(c, Device::cpu(), nullptr)->state_dict();
  EXPECT_EQ(a.at("fc.weight").to_vector<float>(), b.at("fc.weight").to_vector<float>());
  c.seed = 1;
  EXPECT_NE(train::make_model(c, Device::cpu(), nullptr)->state_dict().at("fc.weight").to_vector<float>(),
            a.at("fc.weight").to_vector<float>());

  c.precision = train::Precision::Fp16;
  c.half_params = true;
  int half = 0, fp32_batch_norm = 0;
  train::make_model(c, Device::cpu(), nullptr)->apply([&](nn::Module& m) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) half += conv->weight.dtype() == DType::F16;
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) fp32_batch_norm += bn->weight.dtype() == DType::F32;
  });
  EXPECT_GT(half, 0);
  EXPECT_GT(fp32_batch_norm, 0);
}

TEST(Components, AirbenchModelWithoutImagesKeepsAFrozenStemOfTheSameShape) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Airbench;
  c.model = train::ModelKind::AirNet;
  auto model = train::make_model(c, Device::cpu(), nullptr);
  auto* net = dynamic_cast<models::AirNet*>(model.get());
  ASSERT_NE(net, nullptr);
  EXPECT_FALSE(net->stem().weight.requires_grad());
}

TEST(Components, SgdIsNesterovWithMomentumAndTakesEachGroupsScales) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Airbench;  // groups: BatchNorm biases at 64x the lr, 1/64 the decay; the whitening bias
  c.model = train::ModelKind::AirNet;
  auto model = train::make_model(c, Device::cpu(), nullptr);
  const auto groups = train::parameter_groups(c, *model);
  auto opt = train::make_optimizer(c, groups);
  auto* sgd = dynamic_cast<optim::SGD*>(opt.get());
  ASSERT_NE(sgd, nullptr);
  ASSERT_EQ(sgd->num_groups(), 3u);
  EXPECT_TRUE(sgd->group_options()[0].nesterov);
  EXPECT_EQ(sgd->group_options()[0].momentum, c.momentum);
  EXPECT_EQ(sgd->lr(1), c.lr * 64.0);
  EXPECT_EQ(sgd->group_options()[1].weight_decay, c.weight_decay / 64.0);
  EXPECT_EQ(sgd->lr(2), c.lr);
  EXPECT_EQ(sgd->group_options()[2].weight_decay, c.weight_decay);

  c.momentum = 0.0;  // plain SGD: Nesterov needs momentum
  EXPECT_FALSE(dynamic_cast<optim::SGD*>(train::make_optimizer(c, groups).get())->group_options()[0].nesterov);
}

TEST(Components, AdamWAndMuonAreWhatOptimizerNames) {
  train::TrainerConfig c;
  c.optimizer = train::OptimizerKind::AdamW;
  c.lr = 0.003;
  auto model = train::make_model(c, Device::cpu(), nullptr);
  auto adamw = train::make_optimizer(c, train::parameter_groups(c, *model));
  ASSERT_NE(dynamic_cast<optim::AdamW*>(adamw.get()), nullptr);
  EXPECT_EQ(adamw->lr(0), 0.003);

  train::TrainerConfig m;
  m.recipe = train::Recipe::AirbenchMuon;
  train::apply_recipe_defaults(m, [](const std::string&) { return false; });
  auto airnet = train::make_model(m, Device::cpu(), nullptr);
  const auto groups = train::parameter_groups(m, *airnet);
  auto muon = train::make_optimizer(m, groups);
  ASSERT_NE(dynamic_cast<optim::Muon*>(muon.get()), nullptr);
  ASSERT_EQ(muon->num_groups(), groups.size());
  for (size_t g = 0; g < groups.size(); ++g) EXPECT_EQ(muon->lr(g), m.lr * groups[g].lr_scale) << g;
}

TEST(Components, LossScaleIsDynamicOnlyInFp16) {
  train::TrainerConfig c;
  EXPECT_TRUE(train::scaler_options(c, DType::F16, nullptr).enabled);
  EXPECT_FALSE(train::scaler_options(c, DType::BF16, nullptr).enabled);  // fp32's range: nothing to rescue
  EXPECT_FALSE(train::scaler_options(c, DType::F32, nullptr).enabled);
  c.loss_scale = *train::parse_loss_scale("none");
  EXPECT_FALSE(train::scaler_options(c, DType::F16, nullptr).enabled);
  c.loss_scale = *train::parse_loss_scale("128");
  const amp::GradScaler::Options fixed = train::scaler_options(c, DType::BF16, nullptr);
  EXPECT_TRUE(fixed.enabled);
  EXPECT_EQ(fixed.init_scale, 128.0);
  EXPECT_FALSE(fixed.reduce_found_inf) << "one process: nothing to reduce";
}

TEST(Components, EveryScheduleHasItsShape) {
  train::TrainerConfig c;
  const train::StepCounts steps{10, 100};
  const auto schedule_of = [&](ScheduleKind kind, UnitLr& u) {
    c.schedule = kind;
    return train::make_schedule(c, u.opt, u.groups, steps);
  };
  UnitLr none, decay, linear, step, cycle, cosine;
  EXPECT_EQ(schedule_of(ScheduleKind::None, none), nullptr);
  EXPECT_NEAR(lr_after(*schedule_of(ScheduleKind::LinearDecay, decay), decay.opt, 50), 0.5, 1e-12);
  auto airbench = schedule_of(ScheduleKind::Linear, linear);
  EXPECT_NEAR(linear.opt.lr(0), 0.2, 1e-12);                              // airbench's start
  EXPECT_NEAR(lr_after(*airbench, linear.opt, 23), 1.0, 1e-12);           // its peak at 23% of the run
  EXPECT_NEAR(lr_after(*airbench, linear.opt, 77), 0.07, 1e-12);          // its end
  EXPECT_NEAR(lr_after(*schedule_of(ScheduleKind::Step, step), step.opt, 33), 0.1, 1e-12);  // a third in
  auto one_cycle = schedule_of(ScheduleKind::OneCycle, cycle);
  EXPECT_NEAR(cycle.opt.lr(0), 1.0 / 25.0, 1e-12);
  auto warm = schedule_of(ScheduleKind::Cosine, cosine);
  EXPECT_NEAR(cosine.opt.lr(0), 1.0 / 11.0, 1e-12);  // warm-up over an epoch (10 steps)
  EXPECT_NEAR(lr_after(*warm, cosine.opt, 10), 1.0, 1e-12);
}

// Adds to u a second group, at lr `lr`, trained for its first 3 epochs (the whitening bias).
void add_first_epochs_group(UnitLr& u, double lr, bool decay_to_zero) {
  Tensor bias = zeros({1}).requires_grad_();
  u.opt.add_param_group({bias}, optim::SGD::Options{});
  u.opt.set_lr(1, lr);
  train::ParamGroup whitening_bias;
  whitening_bias.params = {bias};
  whitening_bias.train_epochs = 3;
  whitening_bias.decay_to_zero = decay_to_zero;
  u.groups.push_back(whitening_bias);
}

TEST(Components, AGroupTrainedForItsFirstEpochsDecaysToZeroThereWhateverTheSchedule) {
  train::TrainerConfig c;
  c.schedule = ScheduleKind::None;
  UnitLr u;
  add_first_epochs_group(u, 1.0, true);
  auto schedule = train::make_schedule(c, u.opt, u.groups, {10, 100});
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(lr_after(*schedule, u.opt, 15, 1), 0.5, 1e-12);  // half of its 30 steps
  EXPECT_EQ(u.opt.lr(0), 1.0);                                  // the others keep theirs
  EXPECT_EQ(lr_after(*schedule, u.opt, 30, 1), 0.0);
}

TEST(Components, AGroupFrozenAfterItsFirstEpochsFollowsTheScheduleUntilThen) {
  train::TrainerConfig c;
  c.schedule = ScheduleKind::LinearDecay;
  UnitLr u;
  add_first_epochs_group(u, 2.0, false);
  auto schedule = train::make_schedule(c, u.opt, u.groups, {10, 100});
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(u.opt.lr(1), 2.0, 1e-12);
  EXPECT_NEAR(lr_after(*schedule, u.opt, 29, 1), 2.0 * 0.71, 1e-12);  // the schedule's, at its base
  EXPECT_NEAR(u.opt.lr(0), 0.71, 1e-12);
  EXPECT_EQ(lr_after(*schedule, u.opt, 1, 1), 0.0);  // iteration 30: frozen
  EXPECT_EQ(lr_after(*schedule, u.opt, 50, 1), 0.0);
  EXPECT_NEAR(u.opt.lr(0), 0.2, 1e-12);
}

TEST(Components, LookaheadStartsInEpochThreeThenPullsEveryFiveStepsHarderTowardTheEnd) {
  const train::StepCounts steps{10, 100};  // epoch 3 holds steps 31-40: the average starts at 35
  for (int64_t step : {5, 30, 31, 34, 36}) EXPECT_FALSE(train::lookahead_decay(step, steps).has_value()) << step;
  EXPECT_FALSE(train::lookahead_started(34, steps));
  EXPECT_TRUE(train::lookahead_started(35, steps));
  EXPECT_EQ(*train::lookahead_decay(35, steps), 0.0);  // the average starts as the weights
  EXPECT_NEAR(*train::lookahead_decay(40, steps), std::pow(0.95, 5) * std::pow(0.4, 3), 1e-15);
  EXPECT_NEAR(*train::lookahead_decay(100, steps), std::pow(0.95, 5), 1e-15);
  // airbench94's 48 steps an epoch (batch 1024): its first lookahead step is 145, as there.
  EXPECT_FALSE(train::lookahead_started(144, {48, 480}));
  EXPECT_EQ(*train::lookahead_decay(145, {48, 480}), 0.0);
}

TEST(Components, AllTogetherForARun) {
  train::TrainerConfig c;
  c.precision = train::Precision::Fp16;
  train::Environment env;
  env.dtype = DType::F16;
  train::Components parts = train::make_components(c, env, nullptr, {10, 150});
  EXPECT_TRUE(parts.scaler->is_enabled());
  EXPECT_NE(parts.schedule, nullptr);
  EXPECT_EQ(parts.lookahead, nullptr);
  EXPECT_EQ(parts.steps.total, 150);
  EXPECT_EQ(&parts.net(), parts.model.get()) << "one process: no DDP wrapper";
  train::distribute(parts, env, /*sync_batch_norm=*/false);
  EXPECT_EQ(parts.ddp, nullptr);
  c.lookahead = true;
  EXPECT_NE(train::make_components(c, env, nullptr, {10, 150}).lookahead, nullptr);
}

}  // namespace
}  // namespace demi

// --recipe cct: picked by --model cct4 / cct7, its flag defaults (only for flags not given), the
// model it refuses, its parameter groups (no weight decay on norms, biases and the positional
// embedding), and the optimizer and schedule the components build from them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "models/cct.h"
#include "support/error_of.h"
#include "train/components.h"

namespace demi {
namespace {

using testing::HasSubstr;

auto given(std::set<std::string> flags) {
  return [flags](const std::string& flag) { return flags.count(flag) > 0; };
}

TEST(CctRecipe, ACctModelPicksItAndItFillsOnlyTheFlagsNotGiven) {
  train::TrainerConfig c;
  c.model = train::ModelKind::Cct7;
  c.lr = 3e-4;
  train::apply_recipe_defaults(c, given({"--model", "--lr"}));
  EXPECT_EQ(c.recipe, train::Recipe::Cct);
  EXPECT_EQ(c.model, train::ModelKind::Cct7);
  EXPECT_EQ(c.optimizer, train::OptimizerKind::AdamW);
  EXPECT_EQ(c.lr, 3e-4);
  EXPECT_EQ(c.weight_decay, 0.06);
  EXPECT_EQ(c.schedule, train::ScheduleKind::Cosine);
  EXPECT_EQ(c.label_smoothing, 0.1);
  EXPECT_EQ(c.batch_size, 128);

  train::TrainerConfig recipe_only;
  recipe_only.recipe = train::Recipe::Cct;
  train::apply_recipe_defaults(recipe_only, given({"--recipe"}));
  EXPECT_EQ(recipe_only.model, train::ModelKind::Cct4);
  EXPECT_EQ(recipe_only.lr, 1e-3);

  // --recipe standard on a CCT keeps the standard recipe.
  train::TrainerConfig standard;
  standard.model = train::ModelKind::Cct4;
  train::apply_recipe_defaults(standard, given({"--model", "--recipe"}));
  EXPECT_EQ(standard.recipe, train::Recipe::Standard);
  EXPECT_EQ(standard.optimizer, train::OptimizerKind::Sgd);
}

TEST(CctRecipe, RefusesAModelThatIsNotACct) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Cct;
  c.model = train::ModelKind::AirNet;
  EXPECT_THAT(test::error_of([&] { train::apply_recipe_defaults(c, given({"--recipe", "--model"})); }),
              HasSubstr("--recipe cct trains a CCT (cct4 or cct7), not AirNet"));
  EXPECT_EQ(train::from_name<train::ModelKind>("cct4"), train::ModelKind::Cct4);
  EXPECT_EQ(train::name_of(train::Recipe::Cct), "cct");
}

train::TrainerConfig cct4_config() {
  train::TrainerConfig c;
  c.model = train::ModelKind::Cct4;
  train::apply_recipe_defaults(c, given({"--model"}));
  return c;
}

TEST(CctRecipe, NoWeightDecayOnNormsBiasesAndThePositionalEmbedding) {
  const train::TrainerConfig c = cct4_config();
  auto model = train::make_model(c, Device::cpu(), nullptr);
  const std::vector<train::ParamGroup> groups = train::parameter_groups(c, *model);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].weight_decay_scale, 1.0);
  EXPECT_EQ(groups[1].weight_decay_scale, 0.0);
  const Tensor& positional = dynamic_cast<models::Cct&>(*model).positional_emb;
  for (const auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    auto in = [&p = p](const train::ParamGroup& g) {
      int n = 0;
      for (const Tensor& t : g.params) n += t.is_same(p);
      return n;
    };
    const bool exempt = name.find("norm") != std::string::npos || name.find("bias") != std::string::npos ||
                        p.is_same(positional);
    EXPECT_EQ(in(groups[0]), exempt ? 0 : 1);
    EXPECT_EQ(in(groups[1]), exempt ? 1 : 0);
  }
  // 2 convolutions, 4 layers of in-projection, out_proj, linear1, linear2, the pooling weight, the head.
  EXPECT_EQ(groups[0].params.size(), 2u + 4 * 4 + 2);
  const data::AugmentOptions a = train::train_augmentation(c);
  EXPECT_EQ(a.crop_padding, 4);
  EXPECT_TRUE(a.flip);
}

TEST(CctRecipe, AdamWWithTheGroupsDecaysAndCosineWithWarmUp) {
  const train::TrainerConfig c = cct4_config();
  const train::StepCounts steps = train::step_counts(c, 100);  // 15 epochs of 100 steps
  train::Components parts = train::make_components(c, train::Environment{}, nullptr, steps);
  auto* adamw = dynamic_cast<optim::AdamW*>(parts.optimizer.get());
  ASSERT_NE(adamw, nullptr);
  ASSERT_EQ(adamw->group_options().size(), 2u);
  EXPECT_EQ(adamw->group_options()[0].weight_decay, 0.06);
  EXPECT_EQ(adamw->group_options()[1].weight_decay, 0.0);
  ASSERT_NE(parts.schedule, nullptr);
  // A linear warm-up over the first epoch (100 steps, under a tenth of 1500), then cosine to 0.
  EXPECT_LT(parts.schedule->schedule_factor(0), 0.02);
  EXPECT_NEAR(parts.schedule->schedule_factor(50), 0.5, 0.01);
  EXPECT_NEAR(parts.schedule->schedule_factor(100), 1.0, 1e-12);
  EXPECT_NEAR(parts.schedule->schedule_factor(800), 0.5, 0.01);
  EXPECT_NEAR(parts.schedule->schedule_factor(1500), 0.0, 1e-12);
}

}  // namespace
}  // namespace demi

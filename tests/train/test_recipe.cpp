// train_cifar's recipes: airbench's flag defaults (only for flags not given), its model (whitened
// frozen stem, frozen BatchNorm weights) and parameter groups, and its augmentation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "models/models.h"
#include "models/whitening.h"
#include "support/error_of.h"
#include "train/recipe.h"

namespace demi {
namespace {

using testing::HasSubstr;

// n random 32x32 RGB images, labels cycling over 10 classes.
data::Dataset random_images(int64_t n) {
  data::Dataset d;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 10);
  d.labels = tensor(labels, {n});
  Generator gen(11);
  d.images = (rand({n, 3, 32, 32}, gen) * 255.0).to(DType::U8);
  return d;
}

TEST(Recipe, AirbenchFillsOnlyTheFlagsNotGiven) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Airbench;
  c.batch_size = 512;
  c.label_smoothing = 0.0;
  const std::set<std::string> given = {"--batch-size", "--label-smoothing"};
  train::apply_recipe_defaults(c, [&](const std::string& flag) { return given.count(flag) > 0; });
  EXPECT_EQ(c.model, train::ModelKind::AirNet);
  EXPECT_EQ(c.epochs, 10);
  EXPECT_EQ(c.batch_size, 512);
  EXPECT_NEAR(c.lr, 0.75, 1e-12);  // 1.5 per 1024 images, scaled to the batch given
  EXPECT_EQ(c.momentum, 0.85);
  EXPECT_NEAR(c.weight_decay, 0.0153 / 11.5, 1e-15);
  EXPECT_EQ(c.label_smoothing, 0.0);
  EXPECT_EQ(c.schedule, train::ScheduleKind::Linear);
  EXPECT_EQ(c.tta, 2);
  EXPECT_TRUE(c.lookahead);

  train::TrainerConfig standard;
  train::apply_recipe_defaults(standard, [](const std::string&) { return false; });
  EXPECT_EQ(standard.model, train::ModelKind::SmallCNN);
  EXPECT_EQ(standard.lr, 0.1);
}

TEST(Recipe, AirbenchNamesTheModelItNeeds) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Airbench;
  c.model = train::ModelKind::SmallCNN;
  EXPECT_THAT(test::error_of([&] { train::apply_recipe_defaults(c, [](const std::string& f) { return f == "--model"; }); }),
              HasSubstr("--model AirNet"));
  // An unknown recipe is refused where its name is parsed (the command line, a checkpoint).
  EXPECT_THAT(test::error_of([&] { train::from_name<train::Recipe>("fast"); }),
              HasSubstr("standard, airbench, airbench-muon"));
}

TEST(Recipe, AirbenchMuonDefaultsAndWhatItRefuses) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::AirbenchMuon;
  train::apply_recipe_defaults(c, [](const std::string&) { return false; });
  EXPECT_EQ(c.model, train::ModelKind::AirNet);
  EXPECT_EQ(c.optimizer, train::OptimizerKind::Muon);
  EXPECT_EQ(c.epochs, 8);
  EXPECT_EQ(c.batch_size, 2000);
  EXPECT_EQ(c.lr, 0.24);
  EXPECT_EQ(c.momentum, 0.85);
  EXPECT_EQ(c.schedule, train::ScheduleKind::LinearDecay);
  EXPECT_EQ(c.tta, 2);
  EXPECT_FALSE(c.lookahead);

  train::TrainerConfig sgd;
  sgd.recipe = train::Recipe::AirbenchMuon;
  sgd.optimizer = train::OptimizerKind::Sgd;
  EXPECT_THAT(test::error_of([&] { train::apply_recipe_defaults(sgd, [](const std::string& f) { return f == "--optimizer"; }); }),
              HasSubstr("--recipe airbench"));
  train::TrainerConfig standard;
  standard.optimizer = train::OptimizerKind::Muon;
  EXPECT_THAT(test::error_of([&] { train::apply_recipe_defaults(standard, [](const std::string&) { return false; }); }),
              HasSubstr("pass --recipe airbench-muon"));
}

TEST(Recipe, AirbenchMuonGroupsFiltersForMuonAndTheRestForSgd) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::AirbenchMuon;
  train::apply_recipe_defaults(c, [](const std::string&) { return false; });
  Generator gen(0);
  const data::Dataset images = random_images(20);
  auto model = train::make_recipe_model(c, gen, &images);
  const std::vector<train::ParamGroup> groups = train::parameter_groups(c, *model);
  ASSERT_EQ(groups.size(), 4u);
  // Filters: the six 3x3 convolutions (not the frozen stem), Muon with airbench94_muon's options.
  ASSERT_TRUE(groups[0].muon.has_value());
  EXPECT_EQ(groups[0].params.size(), 6u);
  for (const Tensor& p : groups[0].params) EXPECT_EQ(p.dim(), 4);
  EXPECT_EQ(groups[0].muon->momentum, 0.6);
  EXPECT_EQ(groups[0].muon->ns_steps, 3);
  EXPECT_TRUE(groups[0].muon->normalize_weights);
  EXPECT_EQ(groups[0].muon->weight_decay, 0.0);
  // BatchNorm biases and the whitening bias: 0.053 per summed loss = 106 for the mean over 2000.
  EXPECT_EQ(groups[1].params.size(), 6u);
  EXPECT_NEAR(c.lr * groups[1].lr_scale, 0.053 * 2000, 1e-9);
  ASSERT_EQ(groups[2].params.size(), 1u);
  EXPECT_EQ(groups[2].params[0].dim(), 1);
  EXPECT_EQ(groups[2].train_epochs, 3);
  EXPECT_EQ(groups[0].train_epochs, 0);
  // The head: 0.67 x (9/256)^2 per summed loss; every group decays 2e-6 x batch per step at its lr.
  ASSERT_EQ(groups[3].params.size(), 1u);
  EXPECT_EQ(groups[3].params[0].shape(), (Shape{10, 256}));
  const double head_lr = c.lr * groups[3].lr_scale;
  EXPECT_NEAR(head_lr, 0.67 * 81.0 / 65536.0 * 2000, 1e-9);
  for (size_t g = 1; g < 4; ++g) {
    EXPECT_NEAR(c.lr * groups[g].lr_scale * c.weight_decay * groups[g].weight_decay_scale, 2e-6 * 2000, 1e-12) << g;
  }
}

TEST(Recipe, AirbenchModelHasAWhitenedFrozenStemAndFrozenBatchNormWeights) {
  train::TrainerConfig c;
  c.recipe = train::Recipe::Airbench;
  train::apply_recipe_defaults(c, [](const std::string&) { return false; });
  const data::Dataset images = random_images(40);
  Generator gen(0);
  auto model = train::make_recipe_model(c, gen, &images);
  auto* net = dynamic_cast<models::AirNet*>(model.get());
  ASSERT_NE(net, nullptr);
  EXPECT_FALSE(net->stem().weight.requires_grad());
  EXPECT_TRUE(net->stem().bias.requires_grad());
  EXPECT_EQ(net->stem().bias.to_vector<float>(), std::vector<float>(24, 0.0f)) << "airbench94 zeroes the stem's bias";
  // The stem whitens the normalised training images (all 40 here: fewer than 5,000).
  data::DataLoader::Options o;
  o.batch_size = 40;
  o.shuffle = false;
  data::DataLoader loader(images, o);
  loader.start_epoch(0);
  data::Batch batch;
  ASSERT_TRUE(loader.next(batch));
  EXPECT_EQ(net->stem().weight.to_vector<float>(), models::patch_whitening_weights(batch.images, 2).to_vector<float>());

  int frozen_weights = 0;
  model->apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
      frozen_weights += !bn->weight.requires_grad();
      EXPECT_EQ(bn->options().eps, 1e-12);
    }
  });
  EXPECT_EQ(frozen_weights, 6);

  // Groups: every trainable parameter exactly once; BatchNorm biases at 64x lr and 1/64 decay; the
  // whitening bias as the first group for 3 epochs, then frozen.
  const std::vector<train::ParamGroup> groups = train::parameter_groups(c, *model);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[1].params.size(), 6u);
  EXPECT_EQ(groups[1].lr_scale, 64.0);
  EXPECT_EQ(groups[1].weight_decay_scale, 1.0 / 64.0);
  ASSERT_EQ(groups[2].params.size(), 1u);
  EXPECT_TRUE(groups[2].params[0].is_same(net->stem().bias));
  EXPECT_EQ(groups[2].lr_scale, 1.0);
  EXPECT_EQ(groups[2].weight_decay_scale, 1.0);
  EXPECT_EQ(groups[2].train_epochs, 3);
  EXPECT_FALSE(groups[2].decay_to_zero);
  EXPECT_EQ(groups[0].train_epochs, 0);
  size_t trainable = 0;
  for (const Tensor& p : model->parameters()) trainable += p.requires_grad();
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size() + groups[2].params.size(), trainable);
  for (const Tensor& p : groups[0].params) EXPECT_TRUE(p.requires_grad());
}

TEST(Recipe, AugmentationPerRecipe) {
  train::TrainerConfig c;
  const data::AugmentOptions standard = train::train_augmentation(c);
  EXPECT_EQ(standard.crop_padding, 4);
  EXPECT_EQ(standard.padding, data::Padding::Zero);
  EXPECT_FALSE(standard.alternating_flip);
  c.recipe = train::Recipe::Airbench;
  const data::AugmentOptions airbench = train::train_augmentation(c);
  EXPECT_EQ(airbench.crop_padding, 2);
  EXPECT_EQ(airbench.padding, data::Padding::Reflect);
  EXPECT_TRUE(airbench.alternating_flip);
}

}  // namespace
}  // namespace demi

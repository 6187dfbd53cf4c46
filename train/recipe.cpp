// The recipes' model construction, parameter groups and augmentation (see recipe.h).
#include "train/recipe.h"

#include <algorithm>

#include "models/small_cnn.h"
#include "models/whitening.h"

namespace demi::train {
namespace {

constexpr int64_t kWhiteningImages = 5000;  // airbench: train_images[:5000]

// airbench's hyper-parameters are per 1024 examples with a summed loss and "decoupled" scaling:
// lr 11.5 and weight decay 0.0153 divided by 1024 (1 + 1 / (1 - momentum)). For demi's mean loss
// the SGD lr is that times the batch size (1.465 at batch 1024) and the weight-decay coefficient
// is 0.0153 / 11.5, whatever the batch.
constexpr double kAirbenchMomentum = 0.85;
double airbench_lr(int64_t batch_size) {
  return 11.5 / (1024.0 * (1.0 + 1.0 / (1.0 - kAirbenchMomentum))) * static_cast<double>(batch_size);
}
constexpr double kAirbenchWeightDecay = 0.0153 / 11.5;
constexpr double kAirbenchBiasScale = 64.0;  // BatchNorm biases: lr x 64, weight decay / 64

bool airbench(const TrainerConfig& c) { return c.recipe == "airbench"; }

}  // namespace

void apply_recipe_defaults(TrainerConfig& c, const std::function<bool(const std::string&)>& given) {
  DEMI_CHECK(c.recipe == "standard" || airbench(c), "--recipe: '", c.recipe, "' is not one of standard, airbench");
  if (!airbench(c)) return;
  if (!given("--model")) c.model = "AirNet";
  DEMI_CHECK(c.model == "AirNet", "--recipe airbench trains AirNet (its whitening stem and BatchNorm layout), not ",
             c.model, "; drop --model or pass --model AirNet");
  if (!given("--epochs")) c.epochs = 10;
  if (!given("--batch-size")) c.batch_size = 1024;
  if (!given("--lr")) c.lr = airbench_lr(c.batch_size);
  if (!given("--momentum")) c.momentum = kAirbenchMomentum;
  if (!given("--weight-decay")) c.weight_decay = kAirbenchWeightDecay;
  if (!given("--label-smoothing")) c.label_smoothing = 0.2;
  if (!given("--schedule")) c.schedule = "linear";
  if (!given("--tta")) c.tta = 2;
  if (!given("--lookahead")) c.lookahead = true;
}

std::shared_ptr<nn::Module> make_recipe_model(const TrainerConfig& c, Generator& gen, const data::Dataset& train_set) {
  if (!airbench(c)) return models::make_model(c.model, gen);
  models::AirNetOptions options;
  options.batch_norm_eps = 1e-12;
  options.batch_norm_momentum = 0.4;
  options.dirac_init = true;
  auto net = std::make_shared<models::AirNet>(gen, options);

  // The stem: fixed filters that whiten 2x2 patches of the (normalised) training images. A
  // class-balanced sample: image folders list the classes one after the other.
  const int64_t count = std::min<int64_t>(kWhiteningImages, train_set.size());
  data::DataLoader::Options all;
  all.batch_size = std::max<int64_t>(1, count);
  all.shuffle = false;
  all.prefetch_batches = 1;
  data::DataLoader loader(count < train_set.size() ? data::balanced_subset(train_set, count, c.seed) : train_set, all);
  loader.start_epoch(0);
  data::Batch batch;
  DEMI_CHECK(loader.next(batch), "--recipe airbench: the training set is empty; the whitening stem needs images");
  nn::Conv2d& stem = net->stem();
  {
    NoGradGuard no_grad;
    const Tensor w = models::patch_whitening_weights(batch.images, stem.options().kernel_size, 5e-4);
    kernels(stem.weight).cast(w.ref(), stem.weight.ref());
  }
  stem.weight.requires_grad_(false);
  net->apply([](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) bn->weight.requires_grad_(false);  // scale fixed at 1
  });
  return net;
}

std::vector<ParamGroup> parameter_groups(const TrainerConfig& c, nn::Module& model) {
  std::vector<ParamGroup> groups(1);
  if (!airbench(c)) {
    groups[0].params = model.parameters();
    return groups;
  }
  ParamGroup biases;
  biases.lr_scale = kAirbenchBiasScale;
  biases.weight_decay_scale = 1.0 / kAirbenchBiasScale;
  model.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) biases.params.push_back(bn->bias);
  });
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    const bool bias = std::any_of(biases.params.begin(), biases.params.end(), [&](const Tensor& b) { return b.is_same(p); });
    if (!bias) groups[0].params.push_back(p);
  }
  groups.push_back(biases);
  return groups;
}

data::AugmentOptions train_augmentation(const TrainerConfig& c) {
  data::AugmentOptions a;
  if (airbench(c)) {
    a.crop_padding = 2;
    a.padding = data::Padding::Reflect;
    a.alternating_flip = true;
  }
  return a;
}

}  // namespace demi::train

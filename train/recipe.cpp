// The recipes' model construction, parameter groups and augmentation (see recipe.h).
#include "train/recipe.h"

#include <algorithm>

#include "models/models.h"
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
constexpr int kAirbenchWhiteningBiasEpochs = 3;

// airbench94_muon: Muon for the filters (lr 0.24, momentum 0.6, 3 Newton-Schulz steps, weights
// renormalised), Nesterov SGD (momentum 0.85) for the rest with lrs per summed loss: BatchNorm and
// whitening biases 0.053, the head 0.67, and decay 2e-6 x batch per step. Its head is divided by
// 256 and initialised to unit std where AirNet multiplies by 1/9 with PyTorch's init (the same
// outputs at init): the same training needs (9/256)^2 x its lr on AirNet's head weight.
constexpr int64_t kMuonBatch = 2000;
constexpr double kMuonLr = 0.24;
constexpr double kMuonMomentum = 0.6;
constexpr int kMuonNewtonSchulzSteps = 3;
constexpr double kMuonSgdMomentum = 0.85;
constexpr double kMuonBiasLrPerSum = 0.053;
constexpr double kMuonHeadLrPerSum = 0.67 * (9.0 / 256.0) * (9.0 / 256.0);
constexpr double kMuonDecayPerStepAndImage = 2e-6;
constexpr int kMuonWhiteningBiasEpochs = 3;

// CCT's CIFAR-10 recipe (the paper's configs/pretrained/cct_7-3x1_cifar10_300epochs.yml: AdamW, lr
// 5.5e-4 at batch 128, weight decay 0.06, 10 warm-up epochs of 300, cosine, label smoothing 0.1)
// for runs of a few to tens of epochs: lr 1e-3, about twice the paper's, since a short cosine
// spends most of its steps well below the peak and the run has no time to make up a slow start;
// the paper's decoupled weight decay 0.06 is kept (over a short run it shrinks the weights far less
// than over 300 epochs; raising it to match would fight the few steps there are). The warm-up is
// --schedule cosine's: one epoch or a tenth of the steps, whichever is shorter. The paper's
// RandAugment, mixup, cutmix, stochastic depth 0.1 and attention dropout 0.1 are left out (crop +
// flip only, dropout 0): they pay over hundreds of epochs and slow a short run down.
constexpr double kCctLr = 1e-3;
constexpr double kCctWeightDecay = 0.06;

bool airbench_muon(const TrainerConfig& c) { return c.recipe == Recipe::AirbenchMuon; }
// Both airbench recipes share the model and the augmentation.
bool airbench(const TrainerConfig& c) { return c.recipe == Recipe::Airbench || airbench_muon(c); }

void apply_cct_defaults(TrainerConfig& c, const std::function<bool(const std::string&)>& given) {
  if (!given("--model")) c.model = ModelKind::Cct4;
  DEMI_CHECK(is_cct(c.model), "--recipe cct trains a CCT (cct4 or cct7), not ", name_of(c.model),
             "; drop --model or pass --model cct4 or --model cct7");
  if (!given("--optimizer")) c.optimizer = OptimizerKind::AdamW;
  if (!given("--lr")) c.lr = kCctLr;
  if (!given("--weight-decay")) c.weight_decay = kCctWeightDecay;
  if (!given("--schedule")) c.schedule = ScheduleKind::Cosine;
  if (!given("--label-smoothing")) c.label_smoothing = 0.1;
}

// CCT's groups: the weight matrices and filters with --weight-decay; biases, norms (every
// parameter of fewer than 2 dims) and the positional embedding without (timm's rule, which the
// paper's training uses).
std::vector<ParamGroup> cct_parameter_groups(nn::Module& model) {
  const Tensor& positional = dynamic_cast<models::Cct&>(model).positional_emb;
  ParamGroup decay, no_decay;
  no_decay.weight_decay_scale = 0.0;
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() < 2 || p.is_same(positional) ? no_decay : decay).params.push_back(p);
  }
  return {decay, no_decay};
}

}  // namespace

void apply_recipe_defaults(TrainerConfig& c, const std::function<bool(const std::string&)>& given) {
  DEMI_CHECK(c.optimizer != OptimizerKind::Muon || airbench_muon(c), "--optimizer muon: only --recipe airbench-muon says which "
             "parameters Muon trains (the convolution filters) and which SGD does; pass --recipe airbench-muon");
  if (!given("--recipe") && is_cct(c.model)) c.recipe = Recipe::Cct;
  if (c.recipe == Recipe::Cct) return apply_cct_defaults(c, given);
  if (!airbench(c)) return;
  if (!given("--model")) c.model = ModelKind::AirNet;
  DEMI_CHECK(c.model == ModelKind::AirNet, "--recipe ", name_of(c.recipe), " trains AirNet (its whitening stem and "
             "BatchNorm layout), not ", name_of(c.model), "; drop --model or pass --model AirNet");
  if (airbench_muon(c)) {
    if (!given("--optimizer")) c.optimizer = OptimizerKind::Muon;
    DEMI_CHECK(c.optimizer == OptimizerKind::Muon, "--recipe airbench-muon trains the filters with Muon, not ",
               name_of(c.optimizer), "; drop --optimizer (or use --recipe airbench for SGD)");
    if (!given("--epochs")) c.epochs = 8;
    if (!given("--batch-size")) c.batch_size = kMuonBatch;
    if (!given("--lr")) c.lr = kMuonLr;
    if (!given("--momentum")) c.momentum = kMuonSgdMomentum;
    // The head's L2 coefficient at its lr; the bias groups scale it (parameter_groups).
    if (!given("--weight-decay")) c.weight_decay = kMuonDecayPerStepAndImage / kMuonHeadLrPerSum;
    if (!given("--label-smoothing")) c.label_smoothing = 0.2;
    if (!given("--schedule")) c.schedule = ScheduleKind::LinearDecay;
    if (!given("--tta")) c.tta = 2;
    return;
  }
  if (!given("--epochs")) c.epochs = 10;
  if (!given("--batch-size")) c.batch_size = 1024;
  if (!given("--lr")) c.lr = airbench_lr(c.batch_size);
  if (!given("--momentum")) c.momentum = kAirbenchMomentum;
  if (!given("--weight-decay")) c.weight_decay = kAirbenchWeightDecay;
  if (!given("--label-smoothing")) c.label_smoothing = 0.2;
  if (!given("--schedule")) c.schedule = ScheduleKind::Linear;
  if (!given("--tta")) c.tta = 2;
  if (!given("--lookahead")) c.lookahead = true;
}

std::shared_ptr<nn::Module> make_recipe_model(const TrainerConfig& c, Generator& gen, const data::Dataset* train_set) {
  if (!airbench(c)) return models::make_model(name_of(c.model), gen);
  models::AirNetOptions options;
  options.batch_norm_eps = 1e-12;
  options.batch_norm_momentum = 0.4;
  options.dirac_init = true;
  auto net = std::make_shared<models::AirNet>(gen, options);

  // The stem: fixed filters that whiten 2x2 patches of the (normalised) training images. A
  // class-balanced sample: image folders list the classes one after the other. Without images (a
  // memory plan) the stem keeps its random filters: the same shapes, frozen the same way.
  if (train_set) fit_whitening_stem(c, net->stem(), *train_set);
  net->stem().weight.requires_grad_(false);
  if (!airbench_muon(c)) {  // airbench94 starts the whitening bias at 0 (airbench94_muon: PyTorch's init)
    NoGradGuard no_grad;
    net->stem().bias.zero_();
  }
  net->apply([](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) bn->weight.requires_grad_(false);  // scale fixed at 1
  });
  return net;
}

void fit_whitening_stem(const TrainerConfig& c, nn::Conv2d& stem, const data::Dataset& train_set) {
  const int64_t count = std::min<int64_t>(kWhiteningImages, train_set.size());
  data::DataLoader::Options all;
  all.batch_size = std::max<int64_t>(1, count);
  all.shuffle = false;
  all.prefetch_batches = 1;
  data::DataLoader loader(count < train_set.size() ? data::balanced_subset(train_set, count, c.seed) : train_set, all);
  loader.start_epoch(0);
  data::Batch batch;
  DEMI_CHECK(loader.next(batch), "--recipe airbench: the training set is empty; the whitening stem needs images");
  NoGradGuard no_grad;
  stem.weight.copy_(models::patch_whitening_weights(batch.images, stem.options().kernel_size, 5e-4));
}

// airbench-muon's groups: the filters (Muon), then the biases, the whitening bias and the head
// (SGD). lr_scale turns --lr (Muon's) into each SGD group's lr for demi's mean loss: airbench's
// lr per summed loss x the batch size.
std::vector<ParamGroup> muon_parameter_groups(const TrainerConfig& c, nn::Module& model) {
  auto& net = dynamic_cast<models::AirNet&>(model);
  ParamGroup filters, biases, whitening_bias, head;
  optim::Muon::Options muon;
  muon.momentum = kMuonMomentum;
  muon.nesterov = true;
  muon.weight_decay = 0.0;
  muon.ns_steps = kMuonNewtonSchulzSteps;
  muon.normalize_weights = true;
  filters.muon = muon;
  const double batch = static_cast<double>(c.batch_size);
  biases.lr_scale = whitening_bias.lr_scale = kMuonBiasLrPerSum * batch / kMuonLr;
  biases.weight_decay_scale = whitening_bias.weight_decay_scale = kMuonHeadLrPerSum / kMuonBiasLrPerSum;
  whitening_bias.train_epochs = kMuonWhiteningBiasEpochs;
  whitening_bias.params = {net.stem().bias};
  head.lr_scale = kMuonHeadLrPerSum * batch / kMuonLr;
  model.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) biases.params.push_back(bn->bias);
    if (auto* fc = dynamic_cast<nn::Linear*>(&m)) head.params.push_back(fc->weight);
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m); conv && conv != &net.stem()) filters.params.push_back(conv->weight);
  });
  std::vector<ParamGroup> groups = {filters, biases, whitening_bias, head};
  // Every trainable parameter in exactly one group: a model change must not silently freeze one.
  size_t grouped = 0, trainable = 0;
  for (const ParamGroup& g : groups) grouped += g.params.size();
  for (const Tensor& p : model.parameters()) trainable += p.requires_grad();
  DEMI_CHECK(grouped == trainable, "--recipe airbench-muon: ", grouped, " parameters grouped but ", trainable,
             " trainable; the model is not the AirNet the recipe knows");
  return groups;
}

std::vector<ParamGroup> parameter_groups(const TrainerConfig& c, nn::Module& model) {
  if (airbench_muon(c)) return muon_parameter_groups(c, model);
  if (c.recipe == Recipe::Cct) return cct_parameter_groups(model);
  std::vector<ParamGroup> groups(1);
  if (!airbench(c)) {
    groups[0].params = model.parameters();
    return groups;
  }
  // The filters and the head; the BatchNorm biases; the whitening bias, which trains as the first
  // group for airbench's whiten_bias_epochs (3) and is frozen after them.
  ParamGroup biases, whitening_bias;
  biases.lr_scale = kAirbenchBiasScale;
  biases.weight_decay_scale = 1.0 / kAirbenchBiasScale;
  model.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) biases.params.push_back(bn->bias);
  });
  const Tensor& stem_bias = dynamic_cast<models::AirNet&>(model).stem().bias;
  whitening_bias.params = {stem_bias};
  whitening_bias.train_epochs = kAirbenchWhiteningBiasEpochs;
  whitening_bias.decay_to_zero = false;
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad() || p.is_same(stem_bias)) continue;
    const bool bias = std::any_of(biases.params.begin(), biases.params.end(), [&](const Tensor& b) { return b.is_same(p); });
    if (!bias) groups[0].params.push_back(p);
  }
  groups.push_back(biases);
  groups.push_back(whitening_bias);
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

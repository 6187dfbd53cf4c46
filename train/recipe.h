// train_cifar's recipes: what --recipe changes beyond plain flags. "standard" is demi's default
// (PyTorch-initialised model, one parameter group, crop + flip). "airbench" is airbench94's recipe
// for AirNet (Keller Jordan, https://github.com/KellerJordan/cifar10-airbench, legacy/airbench94.py;
// arXiv:2404.00498): whitening stem from patch statistics, identity-initialised convolutions,
// BatchNorm weights frozen at 1 (eps 1e-12, momentum 0.4), BatchNorm biases at 64x the lr,
// reflect-padded 2-pixel translations with alternating flips, plus the flag values set by
// apply_recipe_defaults (batch 1024, Nesterov momentum 0.85, linear warm-up/decay, label smoothing
// 0.2, lookahead, test-time augmentation). "airbench-muon" is airbench94_muon's recipe on the same
// model (airbench94_muon.py in the same repository): the convolution filters trained by Muon, the
// rest by Nesterov SGD, batch 2000, 8 epochs, linear decay to 0, the whitening bias trained for the
// first 3 epochs only, no lookahead. "cct" trains CCT (models/cct.h; the default recipe of --model
// cct4 and cct7): AdamW with no weight decay on norms, biases and the positional embedding, a linear
// warm-up then cosine decay per step, label smoothing 0.1, crop + flip (recipe.cpp says why its lr and
// weight decay).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/data_loader.h"
#include "framework/demi/demi.h"
#include "train/config.h"

namespace demi::train {

// Sets the recipe's value for every flag the user did not give (`given("--lr")` says whether
// --lr was on the command line) and checks that the recipe fits the model. --model cct4 or cct7
// without --recipe picks --recipe cct.
void apply_recipe_defaults(TrainerConfig& c, const std::function<bool(const std::string&)>& given);

// The model the recipe trains, initialised; parameters the recipe freezes have requires_grad
// false. airbench's whitening stem is fitted to train_set (a class-balanced 5,000 images); without
// one (nullptr: a memory plan) it keeps random filters of the same shape.
std::shared_ptr<nn::Module> make_recipe_model(const TrainerConfig& c, Generator& gen, const data::Dataset* train_set);
// airbench's stem: filters that whiten 2x2 patches of the training images.
void fit_whitening_stem(const TrainerConfig& c, nn::Conv2d& stem, const data::Dataset& train_set);

// The optimizer's parameter groups: the trainable parameters, each group with multipliers of
// --lr and --weight-decay.
struct ParamGroup {
  std::vector<Tensor> params;
  double lr_scale = 1.0;
  double weight_decay_scale = 1.0;
  // Set: the group takes Muon updates with these options (lr = --lr x lr_scale); --optimizer muon.
  std::optional<optim::Muon::Options> muon;
  // > 0: the group trains for its first train_epochs epochs only, and its lr is 0 from then on
  // (the whitening bias of both airbench recipes). Over those epochs its lr falls linearly from its
  // base to 0 in place of --schedule (decay_to_zero: airbench94_muon), or follows --schedule
  // (airbench94, which turns the bias's requires_grad off after them).
  int train_epochs = 0;
  bool decay_to_zero = true;
};
std::vector<ParamGroup> parameter_groups(const TrainerConfig& c, nn::Module& model);

// Training-set augmentation.
data::AugmentOptions train_augmentation(const TrainerConfig& c);

}  // namespace demi::train

// AirNet: the network of Keller Jordan's airbench94, the CIFAR-10 speed record
// (https://github.com/KellerJordan/cifar10-airbench; "94% on CIFAR-10 in 3.29 Seconds on a Single
// GPU", arXiv:2404.00498), here without its training recipe (train/recipe.h adds that). Its
// PyTorch twin is crosscheck/torch_nets.py's AirNet, with the same state_dict names.
#pragma once

#include <memory>

#include "framework/demi/demi.h"

namespace demi::models {

// What airbench's recipe changes in AirNet's construction (the defaults are PyTorch's). The
// recipe's other pieces (whitening stem, frozen BN weights) act on the built model: see
// train/recipe.h.
struct AirNetOptions {
  double batch_norm_eps = 1e-5;       // airbench: 1e-12
  double batch_norm_momentum = 0.1;   // PyTorch's convention; airbench: 0.4
  bool dirac_init = false;            // airbench: each 3x3 conv's first `in` filters start as the identity
};

// 2x2 whitening conv (3->24, bias) + GELU, three blocks conv3 -> maxpool2 -> BN -> GELU -> conv3
// -> BN -> GELU (widths 64, 256, 256), global max pool, fc(256, 10, no bias), logits / 9.
// 1,972,792 parameters.
class AirNet : public nn::Module {
 public:
  explicit AirNet(Generator& gen = default_generator(), const AirNetOptions& options = AirNetOptions());
  Tensor forward(const Tensor& x) override;
  // The 2x2 "whitening" convolution ("whiten").
  nn::Conv2d& stem();

 private:
  std::shared_ptr<nn::Conv2d> whiten_;
  std::shared_ptr<nn::Sequential> blocks_;  // three blocks of conv1, pool, bn1, conv2, bn2
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace demi::models

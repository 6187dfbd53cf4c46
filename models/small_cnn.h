// SmallCNN and AirNet exactly as ../shared/bench/README.md defines them, so that they compare one
// to one with the PyTorch reference (torch_reference.py).
#pragma once

#include <memory>
#include <string>

#include "framework/demi/demi.h"

namespace demi::models {

// conv_bn_relu(3,32) conv_bn_relu(32,32) pool, (32,64) (64,64) pool, (64,128) pool, GAP, fc(128,10).
// 141,034 parameters.
class SmallCNN : public nn::Module {
 public:
  explicit SmallCNN(Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::Linear> fc_;
};

// What airbench's recipe changes in AirNet's construction (the defaults are PyTorch's, as in the
// benchmark reference). The recipe's other pieces (whitening stem, frozen BN weights) act on the
// built model: see train/recipe.h.
struct AirNetOptions {
  double batch_norm_eps = 1e-5;       // airbench: 1e-12
  double batch_norm_momentum = 0.1;   // PyTorch's convention; airbench: 0.4
  bool dirac_init = false;            // airbench: each 3x3 conv's first `in` filters start as the identity
};

// airbench94's architecture without its recipe: 2x2 whitening conv (3->24, bias) + GELU, three
// blocks conv3 -> maxpool2 -> BN -> GELU -> conv3 -> BN -> GELU (widths 64, 256, 256), global max
// pool, fc(256, 10, no bias), logits / 9. 1,972,792 parameters.
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

// "SmallCNN" or "AirNet"; throws demi::Error naming the choices for anything else.
std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen = default_generator());

}  // namespace demi::models

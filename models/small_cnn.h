// SmallCNN: a plain five-convolution CIFAR-10 classifier, the smaller of the two nets that demi is
// trained and timed on (models/README.md). Its PyTorch twin is crosscheck/torch_nets.py's SmallCNN,
// with the same state_dict names.
#pragma once

#include <memory>

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

}  // namespace demi::models


// nn::Dropout: demi::dropout in training mode, the identity after eval(), as torch.nn.Dropout.
#pragma once

#include "framework/nn/module.h"
#include "framework/ops/ops.h"

namespace demi::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p_(p) {
    DEMI_CHECK(p >= 0.0 && p <= 1.0, "nn::Dropout: p is the probability of zeroing an element and must be in "
               "[0, 1], got p = ", p);
  }
  // Draws from the default generator of x's device.
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace demi::nn

// Activation modules: thin wrappers over demi::relu and demi::gelu.
#pragma once

#include "framework/nn/module.h"
#include "framework/ops/ops.h"

namespace demi::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

}  // namespace demi::nn

// Parameter initialisation with PyTorch's defaults for Conv2d and Linear.
#pragma once

#include "framework/tensor/generator.h"
#include "framework/tensor/tensor.h"

namespace demi::nn::init {

// U(-b, b) with b = 1 / sqrt(fan_in): what kaiming_uniform_(a = sqrt(5)) gives, PyTorch's default
// for Conv2d and Linear weights, and the bound it uses for their biases.
void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen);

}  // namespace demi::nn::init

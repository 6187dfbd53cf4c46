// Parameter initialisation with PyTorch's defaults for Conv2d and Linear.
#pragma once

#include "framework/tensor/generator.h"
#include "framework/tensor/tensor.h"

namespace demi::nn::init {

// U(-b, b) with b = 1 / sqrt(fan_in): what kaiming_uniform_(a = sqrt(5)) gives, PyTorch's default
// for Conv2d and Linear weights, and the bound it uses for their biases.
void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen);

// torch.nn.init.dirac_ for a [out, in, k, k] convolution weight: all zero except weight[i, i, k/2,
// k/2] = 1 for i < min(out, in), so the convolution starts as the identity on those channels
// (airbench applies it to weight.slice(0, in): the first `in` filters pass their input through).
void dirac_(const Tensor& weight);

}  // namespace demi::nn::init

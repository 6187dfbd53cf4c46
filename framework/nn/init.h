// Parameter initialisation: PyTorch's defaults for Conv2d and Linear, and the torch.nn.init
// functions the transformer layers and CCT use.
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

// torch.nn.init.xavier_uniform_ of a 2-D weight [fan_out, fan_in]: U(-b, b) with
// b = gain sqrt(6 / (fan_in + fan_out)) (MultiheadAttention's in_proj_weight).
void xavier_uniform_(const Tensor& weight, Generator& gen, double gain = 1.0);

// torch.nn.init.kaiming_normal_(mode="fan_in", nonlinearity="relu"): N(0, 2 / fan_in), fan_in the
// product of all dims but the first (a convolution's in x k x k).
void kaiming_normal_(const Tensor& weight, Generator& gen);

// torch.nn.init.trunc_normal_: N(mean, std^2) draws, each outside [a, b] (absolute bounds, as
// torch's) drawn again until it falls inside.
void trunc_normal_(const Tensor& t, Generator& gen, double std = 1.0, double mean = 0.0, double a = -2.0,
                   double b = 2.0);

}  // namespace demi::nn::init

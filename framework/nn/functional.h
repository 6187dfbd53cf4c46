// nn::functional: the functional ops under the name libtorch users reach for
// (namespace F = demi::nn::functional; F::relu(x)). Each is the one function in namespace demi.
#pragma once

#include "framework/ops/ops.h"

namespace demi::nn::functional {

using demi::avg_pool2d;
using demi::batch_norm;
using demi::batch_norm_relu;
using demi::batch_norm_gelu;
using demi::BatchNormOptions;
using demi::conv2d;
using demi::cross_entropy;
using demi::CrossEntropyOptions;
using demi::gelu;
using demi::global_avg_pool2d;
using demi::global_max_pool2d;
using demi::linear;
using demi::log_softmax;
using demi::max_pool2d;
using demi::relu;
using demi::softmax;
using demi::dropout;
using demi::layer_norm;

}  // namespace demi::nn::functional

// The forward and backward-data passes of bf16 stride-1 convolutions as implicit GEMMs on the ISA
// level's bf16 tile: no im2col and no col2im. conv2d.cpp sends a bf16 convolution here when its
// level routes convolutions to the bf16 tile (AMX, AVX512_BF16 on AMD; the scalar level, for tests)
// and `takes` says yes; conv2d_implicit.cpp has the layouts.
#pragma once

#include <cstdint>

#include "backends/kernel_checks.h"

namespace demi::backend::cpu::conv2d_implicit {

// Stride 1, padding below the kernel (so that backward-data is a convolution with padding k - 1 - p),
// and 16 or more channels each way (the tile takes channels in blocks of 32 on AMX; a block of 3
// would be mostly zeros).
bool takes(const ConvGeom& g);

// output = input * weight + bias (bias: o fp32 values, or nullptr), rounded once to bf16.
void forward(const Conv2dArgs& a, const ConvGeom& g, const float* bias);
// input (grad_x) = output (grad_y) convolved with the flipped, transposed weights.
void backward_data(const Conv2dArgs& a, const ConvGeom& g);

}  // namespace demi::backend::cpu::conv2d_implicit

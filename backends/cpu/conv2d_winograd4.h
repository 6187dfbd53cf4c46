// Winograd F(4x4, 3x3) for the forward and backward-data passes of bf16 convolutions that run on the
// fp32 tile (bf16 widened on the way in, the result rounded once): each 4x4 block of outputs comes
// from the 6x6 input patch around it, Y = A^T [sum_c (G g G^T) . (B^T d B)] A, 36 GEMMs of 2.25
// values an output where F(2x2, 3x3) (winograd.h) runs 16 of 4: 1.78x fewer multiplies.
//
// Why bf16 only, and only up to 64 summed channels: F(4x4)'s error is larger than F(2x2)'s and breaks
// the bound of every fp32 convolution test (winograd.h), but a bf16 result is rounded to 8 bits
// anyway. With Barabasz et al.'s points 0, -1, 1, 1/2, -2 ("Error analysis and improving the accuracy
// of Winograd convolution", 2020; the best of those tried), the largest error over what that rounding
// leaves of the tests' bound (accumulated(BF16, 9 K), tests/support/tolerance.h) is 0.29 / 0.77 / 1.03
// at K = 16 / 64 / 256 summed channels (benchmarks/winograd_error, 64000 outputs each; the tests' own
// shapes through this code: 0.65 at 64, 1.19 at 256). So up to 64. An fp16 result (3 more bits) leaves
// too little room: 1.83 at K = 64. F(3x3, 3x3) is no better (1.24-1.41 for bf16 at 256). Past 64
// channels, and for backward-weight (sums over whole batches), F(2x2) stays.
//
//   B^T = | 1 -3/2  -2  3/2  1  0 |   G = |   1      0      0   |   A^T = | 1  1  1  1    1  0 |
//         | 0   1  -5/2 1/2  1  0 |       | -1/3   1/3  -1/3  |         | 0 -1  1 1/2  -2  0 |
//         | 0  -1   1/2 5/2  1  0 |       |  1/3   1/3   1/3  |         | 0  1  1 1/4   4  0 |
//         | 0  -2  -1    2   1  0 |       | -16/15 -8/15 -4/15 |        | 0 -1  1 1/8  -8  1 |
//         | 0  1/2 -1  -1/2  1  0 |       |  1/15 -2/15  4/15 |
//         | 0   1  -3/2  -2 3/2  1 |       |   0      0      1   |
//
// G g G^T is computed in double and rounded once, as winograd_error assumes; the input and output
// transforms are fp32 loops over whole rows of tiles (several small planes side by side), which the
// compiler vectorises at the baseline ISA. Only the column moves around them (a padded row into six
// views, four column runs into an output row: isa.h's Winograd4) and the GEMM tile are per level. Where the level's route sends bf16 convolutions to a bf16 tile (AMX, Zen 4's
// AVX512_BF16, the scalar oracle: isa/select.cpp), they never come here.
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"

namespace demi::backend::cpu::conv2d_winograd4 {

// Whether a 3x3 / stride 1 / padding 1 convolution into `outs` channels whose result is `dtype`,
// summing `channels` input channels per output, runs as F(4x4): bf16 up to 64 summed channels
// (above), and channels x outs >= 1024 where the level's vectors hold 8 floats (AVX2), >= 16384 where
// they hold 16 (AVX-512, where F(2x2) runs twice as fast as on AVX2 and F(4x4) 1.4x): where the
// GEMMs' saving outweighs the transforms' extra cost (conv2d_winograd4.cpp has the measurements).
// DEMI_WINOGRAD_F4=0 turns it off (F(2x2) instead), for A/B benchmarks.
bool takes(DType dtype, int64_t channels, int64_t outs);

// output (n x outs x h x w) = input (n x ins x h x w) convolved with the 3x3 filters w [outs][ins]
// (fp32) plus bias (outs fp32 values, or nullptr), padding 1. With `adjoint`, w is the forward weight
// [ins][outs] of the convolution whose backward-data this is, each filter used rotated by 180 degrees.
// T is Eigen::half or Eigen::bfloat16 (fp16 only where a caller forces it: takes() says no).
template <typename T>
void conv(const T* input, int64_t n, int64_t ins, int64_t h, int64_t w, const float* weight, int64_t outs,
          bool adjoint, const float* bias, T* output);

}  // namespace demi::backend::cpu::conv2d_winograd4

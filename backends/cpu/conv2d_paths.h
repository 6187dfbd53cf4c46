// What conv2d.cpp (the choice of each pass's path, im2col and col2im, fp64 on Eigen) shares with the
// files of the paths it chooses: conv2d_packed.cpp (im2col + the packed GEMMs of the level's fp32
// tile), conv2d_winograd.cpp (Winograd F(2x2, 3x3) on that tile) and conv2d_bf16.cpp (im2col + the
// level's bf16 tile). The other two paths have their own headers: conv2d_implicit.h and
// conv2d_winograd4.h. The path files take fp32 weights and bias (half ones widened by conv2d.cpp)
// and T = float, Eigen::half or Eigen::bfloat16 data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_walk.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu::conv2d_paths {

using namespace conv2d_walk;
using BF16 = Eigen::bfloat16;

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;

// Output rows are processed in chunks whose column matrix (kChunkBytes or less, half of a Zen 3
// core's L2) stays in cache between im2col writing it and the GEMM packing it; on SmallCNN this
// beat whole-image column matrices and smaller chunks.
constexpr int64_t kChunkBytes = 256 * 1024;

// im2col and col2im (conv2d.cpp) for output rows [oy_begin, oy_end), rows of col ld apart.
template <typename T, typename Acc>
void im2col(const T* x, Acc* col, const ConvGeom& g, int64_t oy_begin, int64_t oy_end, int64_t ld);
template <typename Acc>
void col2im(Acc* col, Acc* x, const ConvGeom& g, int64_t oy_begin, int64_t oy_end, int64_t ld);

// Output rows per chunk: as many as keep the chunk's column matrix within kChunkBytes.
template <typename Acc>
int64_t chunk_rows(const ConvGeom& g) {
  return std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(1, g.ckk() * g.ow * int64_t(sizeof(Acc))), 1, g.oh);
}

// The tensor's data as Acc: the data itself when T is Acc, else a widened copy in `slot`.
template <typename T, typename Acc>
const Acc* widen(const T* src, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, Acc>) {
    return src;
  } else {
    Acc* out = thread_scratch<Acc>(slot, n);
    convert_n(src, out, n);
    return out;
  }
}

// Where an Acc result of n elements goes: straight into dst when T is Acc, else into `slot`, to be
// rounded into dst afterwards.
template <typename T, typename Acc>
Acc* result_buffer(T* dst, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, Acc>) {
    return dst;
  } else {
    return thread_scratch<Acc>(slot, n);
  }
}

// --- conv2d_packed.cpp: im2col + packed GEMM, fp32 sums -------------------------------------------

// The packed paths' walk: GEMMs of a few hundred columns at least (the bf16 tile's too).
Walk packed_walk(const ConvGeom& g);
template <typename T>
void forward_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias);
template <typename T>
void backward_data_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w);
// Into the calling thread's partial grad_w^T (ckk x o, wsize apart) and grad_b (o doubles apart).
template <typename T>
void backward_weight_packed(const Conv2dArgs& a, const ConvGeom& g, float* partial, double* bias_partial, int threads);
// backward-weight's product C (m x n) += A (m x depth) B^T (B: n x depth), depth contiguous in both;
// as dots (the dot tile) below the measured crossover, else packed.
bool grad_weight_as_dots(int64_t m, int64_t n);
void grad_weight_product(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t n, int64_t depth,
                         float* c, packed_gemm::Accumulate accumulate = packed_gemm::Accumulate::Yes);

// --- conv2d_winograd.cpp: Winograd F(2x2, 3x3), fp32 sums ---------------------------------------

// Whether a convolution runs as Winograd (3x3, stride 1, padding 1, enough channels; DEMI_WINOGRAD).
bool use_winograd(const ConvGeom& g);
template <typename T>
void forward_winograd(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias);
template <typename T>
void backward_data_winograd(const Conv2dArgs& a, const ConvGeom& g, const float* w);
// Writes grad_w itself; the bias sums go to bias_partial (o doubles per thread).
template <typename T>
void backward_weight_winograd(const Conv2dArgs& a, const ConvGeom& g, double* bias_partial, int threads);

// --- conv2d_bf16.cpp: bf16 on the level's bf16 tile, fp32 sums -----------------------------------

// Whether a bf16 convolution takes the bf16 tile (the level's isa::Bf16Route).
bool use_bf16_tile(const ConvGeom& g);
void forward_bf16(const Conv2dArgs& a, const ConvGeom& g, const float* bias);
void backward_data_bf16(const Conv2dArgs& a, const ConvGeom& g);
// The threads split the images, each into its own partial grad_w^T, as backward_weight_packed.
void backward_weight_bf16(const Conv2dArgs& a, const ConvGeom& g, float* partial, double* bias_partial, int threads);
// Whether bf16 backward-weight splits grad_w between the threads instead (DEMI_BF16_WEIGHT_GRAD).
bool split_weight_grad(const ConvGeom& g);
// Into grad_wt (ckk x o, fp32, zeroed) and bias_sum (o doubles), the threads splitting grad_wt's rows.
void backward_weight_bf16_split(const Conv2dArgs& a, const ConvGeom& g, float* grad_wt, double* bias_sum);

}  // namespace demi::backend::cpu::conv2d_paths

// conv2d_paths.h's packed path: im2col (or the image itself, for 1x1 convolutions) and the packed
// GEMMs of packed_gemm.h on the ISA level's fp32 tile, for fp32 and half data widened to fp32.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/conv2d_paths.h"
#include "backends/cpu/packed_gemm.h"

namespace demi::backend::cpu::conv2d_paths {

// The packed path's walk (conv2d_walk.h): GEMMs of at least kMinCols columns. (AirNet's 7x7 planes,
// cut into 4-row chunks by kChunkBytes, ran as 28-column GEMMs, and backward-weight loaded and
// stored its 2304 x 256 accumulator for every 28 positions.)
Walk packed_walk(const ConvGeom& g) {
  constexpr int64_t kMinCols = 384;
  if (g.plane() >= kMinCols) {
    return {1, std::clamp(std::max(chunk_rows<float>(g), ceil_div(kMinCols, g.ow)), int64_t(1), g.oh)};
  }
  return {balanced_group(g.n, ceil_div(kMinCols, g.plane()), available_threads()), g.oh};
}

template <typename T>
void forward_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w;
  const Walk wk = packed_walk(g);
  float* packed = thread_scratch<float>(kSlotPacked, packed_gemm::packed_size(g.o, ckk));
  packed_gemm::pack_a(w, ckk, 1, g.o, ckk, packed);
  const T* input = a.input.as<T>();
  T* output = a.output.as<T>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    if (ni == 1) {
      const T* x = input + i0 * image;
      float* y = result_buffer<T, float>(output + i0 * g.o * plane, g.o * plane, kSlotImage);
      if (std::is_same_v<T, float> && g.pointwise()) {  // the image is its own column matrix
        packed_gemm::gemm(packed, g.o, ckk, reinterpret_cast<const float*>(x), plane, plane, y, plane, bias);
      } else {
        float* col = thread_scratch<float>(kSlotCol, ckk * wk.rows * g.ow);
        for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
          const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
          im2col(x, col, g, oy, end, len);
          packed_gemm::gemm(packed, g.o, ckk, col, len, len, y + oy * g.ow, plane, bias);
        }
      }
      if constexpr (!std::is_same_v<T, float>) convert_n(y, output + i0 * g.o * plane, g.o * plane);
      return;
    }
    // Small images side by side: one GEMM, then each image's block copied out.
    const int64_t cols = ni * plane;
    float* col = thread_scratch<float>(kSlotCol, ckk * cols);
    for (int64_t k = 0; k < ni; ++k) im2col(input + (i0 + k) * image, col + k * plane, g, 0, g.oh, cols);
    float* y = thread_scratch<float>(kSlotImage, g.o * cols);
    packed_gemm::gemm(packed, g.o, ckk, col, cols, cols, y, cols, bias);
    for (int64_t k = 0; k < ni; ++k) {
      for (int64_t o = 0; o < g.o; ++o) convert_n(y + o * cols + k * plane, output + ((i0 + k) * g.o + o) * plane, plane);
    }
  });
}

// grad_col = W^T grad_y, then col2im: A is W^T (ckk x o).
template <typename T>
void backward_data_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w;
  const Walk wk = packed_walk(g);
  float* packed = thread_scratch<float>(kSlotPacked, packed_gemm::packed_size(ckk, g.o));
  packed_gemm::pack_a(w, 1, ckk, ckk, g.o, packed);
  const T* grad_y = a.output.as<T>();
  T* grad_x = a.input.as<T>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    if (ni == 1) {
      const float* gy = widen<T, float>(grad_y + i0 * g.o * plane, g.o * plane, kSlotGradY);
      float* gx = result_buffer<T, float>(grad_x + i0 * image, image, kSlotImage);
      if (g.pointwise()) {
        packed_gemm::gemm(packed, g.c, g.o, gy, plane, plane, gx, plane, nullptr);
      } else {
        float* gcol = thread_scratch<float>(kSlotCol, ckk * wk.rows * g.ow);
        std::fill(gx, gx + image, 0.0f);
        for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
          const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
          packed_gemm::gemm(packed, ckk, g.o, gy + oy * g.ow, plane, len, gcol, len, nullptr);
          col2im(gcol, gx, g, oy, end, len);
        }
      }
      if constexpr (!std::is_same_v<T, float>) convert_n(gx, grad_x + i0 * image, image);
      return;
    }
    // Small images side by side: grad_y gathered into one matrix, one GEMM, col2im per image.
    const int64_t cols = ni * plane;
    float* gy = thread_scratch<float>(kSlotGradY, g.o * cols);
    for (int64_t k = 0; k < ni; ++k) {
      for (int64_t o = 0; o < g.o; ++o) convert_n(grad_y + ((i0 + k) * g.o + o) * plane, gy + o * cols + k * plane, plane);
    }
    float* gcol = thread_scratch<float>(kSlotCol, ckk * cols);
    packed_gemm::gemm(packed, ckk, g.o, gy, cols, cols, gcol, cols, nullptr);
    for (int64_t k = 0; k < ni; ++k) {
      float* gx = result_buffer<T, float>(grad_x + (i0 + k) * image, image, kSlotImage);
      std::fill(gx, gx + image, 0.0f);
      col2im(gcol + k * plane, gx, g, 0, g.oh, cols);
      if constexpr (!std::is_same_v<T, float>) convert_n(gx, grad_x + (i0 + k) * image, image);
    }
  });
}

// Backward-weight's products C (m x n) += A (m x depth) B^T (B: n x depth), both operands with the
// depth contiguous (Winograd's V and Z, im2col's columns and grad_y's rows). Small ones (SmallCNN's
// 32..64 channels, 27 x 32 for its first layer) go to the dot tile, which reads both in place;
// large ones (AirNet's 256 channels) to the packed tile, whose 8 x 48 block reuses each load far
// more, which outweighs packing A and transposing B there. The crossover, m n = 40 (m + n), is
// where the two met on an AMX Xeon (docs/BENCHMARKS.md): as dots, 27 x 32 ran 40% faster, 32 x 32
// 20%, 64 x 64 0-10% (the same at avx2), 64 x 128 the same, 64 x 256 and 256 x 256 5-20% slower.
bool grad_weight_as_dots(int64_t m, int64_t n) { return m * n < 40 * (m + n); }
void grad_weight_product(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t n, int64_t depth,
                         float* c, packed_gemm::Accumulate accumulate) {
  if (grad_weight_as_dots(m, n)) {
    packed_gemm::gemm_nt(a, lda, m, b, ldb, n, depth, c, n, accumulate);
    return;
  }
  float* packed = thread_scratch<float>(kSlotPackedCol, packed_gemm::packed_size(m, depth));
  packed_gemm::pack_a(a, lda, 1, m, depth, packed);
  packed_gemm::gemm_bt(packed, m, depth, b, ldb, n, c, n, accumulate);
}

// grad_w^T (ckk x o) += col (ckk x depth) * grad_y^T (depth x o) into the calling thread's partial;
// the depth is a chunk of rows of one image or a group of small images (their grad_y rows gathered
// side by side first).
template <typename T>
void backward_weight_packed(const Conv2dArgs& a, const ConvGeom& g, float* partial, double* bias_partial,
                            int threads) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, wsize = g.o * ckk;
  const Walk wk = packed_walk(g);
  const T* input = a.input.as<T>();
  const T* grad_y = a.output.as<T>();
  const bool want_bias = a.bias.defined();
  for_each_group(g.n, wk, threads, [&](int64_t i0, int64_t ni) {
    const int t = threads > 1 ? omp_get_thread_num() : 0;
    const int64_t max_cols = std::max(ni * plane, wk.rows * g.ow);
    float* col = thread_scratch<float>(kSlotCol, ckk * max_cols);
    float* gy_group = ni > 1 ? thread_scratch<float>(kSlotImage, g.o * ni * plane) : nullptr;
    for (int64_t k = 0; k < ni; ++k) {
      const T* x = input + (i0 + k) * image;
      const float* gy = widen<T, float>(grad_y + (i0 + k) * g.o * plane, g.o * plane, kSlotGradY);
      if (want_bias) {
        for (int64_t o = 0; o < g.o; ++o) {
          bias_partial[t * g.o + o] += static_cast<double>(ConstMatrixMap<float>(gy, g.o, plane).row(o).sum());
        }
      }
      if (ni > 1) {  // gather the group, one product after the last image
        im2col(x, col + k * plane, g, 0, g.oh, ni * plane);
        for (int64_t o = 0; o < g.o; ++o) copy_short(gy + o * plane, plane, gy_group + (o * ni + k) * plane);
        if (k == ni - 1) grad_weight_product(col, ni * plane, ckk, gy_group, ni * plane, g.o, ni * plane, partial + t * wsize);
        continue;
      }
      for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
        const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
        if (std::is_same_v<T, float> && g.pointwise()) {  // rows of the image are the columns
          grad_weight_product(reinterpret_cast<const float*>(x) + oy * g.ow, plane, ckk, gy + oy * g.ow, plane, g.o, len,
                              partial + t * wsize);
        } else {
          im2col(x, col, g, oy, end, len);
          grad_weight_product(col, len, ckk, gy + oy * g.ow, plane, g.o, len, partial + t * wsize);
        }
      }
    }
  });
}

template void forward_packed<float>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void forward_packed<Eigen::half>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void forward_packed<BF16>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void backward_data_packed<float>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_data_packed<Eigen::half>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_data_packed<BF16>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_weight_packed<float>(const Conv2dArgs&, const ConvGeom&, float*, double*, int);
template void backward_weight_packed<Eigen::half>(const Conv2dArgs&, const ConvGeom&, float*, double*, int);
template void backward_weight_packed<BF16>(const Conv2dArgs&, const ConvGeom&, float*, double*, int);

}  // namespace demi::backend::cpu::conv2d_paths

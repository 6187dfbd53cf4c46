// The fp32 GEMM of the convolutions on AVX-512: C[m, n] = init[m] + sum_k A[m, k] B[k, n], with A
// small and reused (the weights, or their transpose), packed once per call into panels of kRows
// rows, and B, C row-major with a row stride (im2col columns, grad_y rows), read and written in
// place. A register tile of kRows x (kVectors * 16) = 8 x 48 keeps 24 accumulators in zmm registers
// and needs no packing of B: the 8-row panels divide every channel count of SmallCNN and AirNet,
// and column edges are masked. Eigen's GEMM packs both operands on every call, which for the
// convolutions' small per-image products (32..128 rows) cost ~20% of the time.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#define DEMI_PACKED_GEMM 1
#else
#define DEMI_PACKED_GEMM 0
#endif

namespace demi::backend::cpu::packed_gemm {

constexpr int64_t kRows = 8;
constexpr int64_t kVectors = 3;
constexpr int64_t kCols = kVectors * 16;

// Floats needed to pack an m x k matrix: ceil(m / kRows) panels of k * kRows.
inline int64_t packed_size(int64_t m, int64_t k) { return (m + kRows - 1) / kRows * kRows * k; }

#if DEMI_PACKED_GEMM
// dst[j * dst_stride + i] = src[i * src_stride + j] for an 8 x 8 block.
inline void transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // r_i[0] r_i+1[0] r_i[1] r_i+1[1] | [4], [5]
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // the same for columns 2, 3 | 6, 7
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));      // column 0 | 4 of 4 rows
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));  // column 1 | 5
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));  // column 2 | 6
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));  // column 3 | 7
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// dst[j * dst_stride + i] = src[i * src_stride + j] for an m x n src.
inline void transpose(const float* src, int64_t src_stride, int64_t m, int64_t n, float* dst, int64_t dst_stride) {
  int64_t i0 = 0;
#if DEMI_PACKED_GEMM
  for (; i0 + 8 <= m; i0 += 8) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) transpose8x8(src + i0 * src_stride + j, src_stride, dst + j * dst_stride + i0, dst_stride);
    for (; j < n; ++j) {
      for (int64_t i = i0; i < i0 + 8; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
  }
#endif
  for (int64_t i = i0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

// Packs A[i, j] = a[i * row_stride + j * col_stride] (m x k) into panels: panel p holds, for each
// j, the kRows values A[p * kRows + r, j] (0 past row m).
inline void pack_a(const float* a, int64_t row_stride, int64_t col_stride, int64_t m, int64_t k, float* out) {
  for (int64_t p = 0; p < m; p += kRows) {
    const int64_t rows = std::min(kRows, m - p);
    if (rows == kRows && col_stride == 1) {  // a full panel of a row-major A: a transpose
      transpose(a + p * row_stride, row_stride, kRows, k, out, kRows);
      out += kRows * k;
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t r = 0; r < rows; ++r) out[r] = a[(p + r) * row_stride + j * col_stride];
      for (int64_t r = rows; r < kRows; ++r) out[r] = 0.0f;
      out += kRows;
    }
  }
}

#if DEMI_PACKED_GEMM
inline __mmask16 lane_mask(int64_t valid) {
  return valid >= 16 ? __mmask16(0xFFFF) : valid <= 0 ? __mmask16(0) : __mmask16((1u << valid) - 1);
}

// One kRows x (V * 16) tile: rows valid rows and cols valid columns of C (the rest neither read
// nor written). Starts from init (one value per row) or 0; when accumulate, from 0 and adds C at
// the end, so that a C summed over many calls (backward-weight over groups of images) is a sum of
// per-call chains rather than one long chain whose running total swamps each new product.
template <int64_t V>
void tile(const float* a_panel, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t k, int64_t rows,
          int64_t cols, const float* init, bool accumulate) {
  __mmask16 mask[V];
  for (int64_t v = 0; v < V; ++v) mask[v] = lane_mask(cols - 16 * v);
  __m512 acc[kRows][V];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
    const __m512 start = init && r < rows ? _mm512_set1_ps(init[r]) : _mm512_setzero_ps();
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) {
      acc[r][v] = accumulate ? _mm512_setzero_ps() : start;
    }
  }
  for (int64_t j = 0; j < k; ++j) {
    const float* brow = b + j * ldb;
    __m512 bv[V];
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], brow + 16 * v);
    const float* ap = a_panel + j * kRows;
#pragma GCC unroll 8
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 3
      for (int64_t v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  // Constant bounds with a test inside, so that acc is only ever indexed by constants and stays in
  // registers (a loop to `rows` makes GCC keep it on the stack, halving the speed).
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) {
      float* out = c + r * ldc + 16 * v;
      const __m512 sum = accumulate ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask[v], out)) : acc[r][v];
      _mm512_mask_storeu_ps(out, mask[v], sum);
    }
  }
}

// C (m x n, row stride ldc) = init + packed A (m x k) * B (k x n, row stride ldb), or with
// accumulate C += A * B. init: m values (one per row of C) or nullptr.
inline void gemm(const float* a_packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c,
                 int64_t ldc, const float* init, bool accumulate = false) {
  // Column tiles outermost: a kCols-wide strip of B (k rows) stays in L1/L2 while every panel of A
  // passes over it.
  for (int64_t col = 0; col < n; col += kCols) {
    const int64_t cols = std::min(kCols, n - col);
    for (int64_t p = 0; p < m; p += kRows) {
      // Narrower tiles for the last columns, so a 64-wide row does not run as two 48-wide tiles.
      const float* a = a_packed + p * k;
      const int64_t rows = std::min(kRows, m - p);
      const float* row_init = init ? init + p : nullptr;
      if (cols > 32) {
        tile<3>(a, b + col, ldb, c + p * ldc + col, ldc, k, rows, cols, row_init, accumulate);
      } else if (cols > 16) {
        tile<2>(a, b + col, ldb, c + p * ldc + col, ldc, k, rows, cols, row_init, accumulate);
      } else {
        tile<1>(a, b + col, ldb, c + p * ldc + col, ldc, k, rows, cols, row_init, accumulate);
      }
    }
  }
}
#endif

}  // namespace demi::backend::cpu::packed_gemm

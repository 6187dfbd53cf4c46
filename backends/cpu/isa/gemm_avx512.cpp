// The packed fp32 GEMM tile on AVX-512F (compiled with -mavx512f ...): 8 rows x 48 columns, 24 zmm
// accumulators, masked column edges and narrower tiles (32, 16) for the last columns, so that a
// 64-wide row does not run as two 48-wide tiles. Whole-width tiles load B unmasked, with the row
// pointers stepped rather than recomputed: masked loads and the index arithmetic held the loop at
// 75-80% of a core's FMA peak on an AMX Xeon, against 93% now with B in L1 (packed_gemm.cpp).
// Also the 4 x 4 dot tile (isa.h) for products of two k-contiguous operands.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kRows = 8;

// One kRows x (V * 16) tile; with `accumulate` the sum starts from 0 and is added to C at the end,
// so that a C summed over many calls (backward-weight over groups of images) is a sum of per-call
// chains rather than one long chain whose running total swamps each new product.
template <int64_t V, bool Full>  // Full: all V * 16 columns valid
void tile(const F32TileArgs& t) {
  __mmask16 mask[V];
  for (int64_t v = 0; v < V; ++v) mask[v] = lane_mask(t.cols - 16 * v);
  __m512 acc[kRows][V];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
    const __m512 start = t.init && !t.accumulate && r < t.rows ? _mm512_set1_ps(t.init[r]) : _mm512_setzero_ps();
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) acc[r][v] = start;
  }
  const float* brow = t.b;
  const float* ap = t.a_panel;
  const int64_t ldb = t.ldb, k = t.k;
  for (int64_t j = 0; j < k; ++j, brow += ldb, ap += kRows) {
    __m512 bv[V];
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) {
      bv[v] = Full ? _mm512_loadu_ps(brow + 16 * v) : _mm512_maskz_loadu_ps(mask[v], brow + 16 * v);
    }
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
    if (r >= t.rows) break;
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) {
      float* out = t.c + r * t.ldc + 16 * v;
      const __m512 sum = t.accumulate ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask[v], out)) : acc[r][v];
      _mm512_mask_storeu_ps(out, mask[v], sum);
    }
  }
}

void tile_entry(const F32TileArgs& t) {
  if (t.cols == 48) {
    tile<3, true>(t);
  } else if (t.cols > 32) {
    tile<3, false>(t);
  } else if (t.cols == 32) {
    tile<2, true>(t);
  } else if (t.cols > 16) {
    tile<2, false>(t);
  } else if (t.cols == 16) {
    tile<1, true>(t);
  } else {
    tile<1, false>(t);
  }
}

// The dot tile: a strip of C in 4 x 4 blocks, each as 16 accumulators of 16 partial sums along k,
// which one shuffle tree (15 steps of two shuffles and an add) folds into one vector of the 16 sums
// at the end.
constexpr int64_t kDotRows = 4, kDotCols = 4;  // 16 accumulators

// One step of k (16 values, lanes past `m` zero) for the block: acc[4 * c + r] += a[r] * b[c], so
// that fold16 leaves row r of the block in 128-bit lane r.
// Inlined into the blocks with acc in their registers (a lambda capturing acc kept it on the stack).
[[gnu::always_inline]] inline void dot_step(__m512 (&acc)[16], const float* const (&a)[kDotRows],
                                            const float* const (&b)[kDotCols], int64_t j, __mmask16 m) {
  __m512 av[kDotRows];
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) av[r] = _mm512_maskz_loadu_ps(m, a[r] + j);
#pragma GCC unroll 4
  for (int c = 0; c < kDotCols; ++c) {
    const __m512 bv = _mm512_maskz_loadu_ps(m, b[c] + j);
#pragma GCC unroll 4
    for (int r = 0; r < kDotRows; ++r) acc[kDotRows * c + r] = _mm512_fmadd_ps(av[r], bv, acc[kDotRows * c + r]);
  }
}

// Lane 4 q + e of the result = the 16 lanes of acc[4 e + q] added up.
[[gnu::always_inline]] inline __m512 fold16(const __m512 (&acc)[16]) {
  __m512 s8[8], s4[4], s2[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // 128-bit blocks: [acc 2i: 0+2, 1+3 | acc 2i+1: 0+2, 1+3]
    const __m512 a = acc[2 * i], b = acc[2 * i + 1];
    s8[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // block q: 4 partial sums of acc 4i + q
    const __m512 a = s8[2 * i], b = s8[2 * i + 1];
    s4[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // block q: 2 partial sums of acc 8i + q, then 2 of acc 8i + 4 + q
    const __m512 a = s4[2 * i], b = s4[2 * i + 1];
    s2[i] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // block q: the sums of acc q, 4 + q, 8 + q, 12 + q
  return _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The block's 16 sums over k, row r in 128-bit lane r.
[[gnu::always_inline]] inline __m512 dot_sums(const float* const (&a)[kDotRows], const float* const (&b)[kDotCols],
                                              int64_t k) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) dot_step(acc, a, b, j, 0xffff);
  if (j < k) dot_step(acc, a, b, j, lane_mask(k - j));
  return fold16(acc);
}

// A whole 4 x 4 block, inlined into dot_tile's walk over the strip with its pointers and k in
// registers (a call per block through the argument struct, with the edge block's clamps and masked
// stores, held SmallCNN's 32 x 32 x 256 products at two thirds of the FMA peak: 0.86x this).
[[gnu::always_inline]] inline void dot_block(const float* a0, int64_t lda, const float* b0, int64_t ldb, float* c,
                                             int64_t ldc, int64_t k, bool accumulate) {
  const float* const a[kDotRows] = {a0, a0 + lda, a0 + 2 * lda, a0 + 3 * lda};
  const float* const b[kDotCols] = {b0, b0 + ldb, b0 + 2 * ldb, b0 + 3 * ldb};
  const __m512 sum = dot_sums(a, b, k);
  const __m128 rows[kDotRows] = {_mm512_extractf32x4_ps(sum, 0), _mm512_extractf32x4_ps(sum, 1),
                                 _mm512_extractf32x4_ps(sum, 2), _mm512_extractf32x4_ps(sum, 3)};
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) {
    float* out = c + r * ldc;
    _mm_storeu_ps(out, accumulate ? _mm_add_ps(rows[r], _mm_loadu_ps(out)) : rows[r]);
  }
}

// A block of fewer rows or columns: rows past `rows` (columns past `cols`) read row 0 again and
// are dropped; one masked load, add and store a row (16 scalar read-modify-writes were a tenth of
// a 256-deep call).
[[gnu::noinline]] void dot_edge(const float* a0, int64_t lda, const float* b0, int64_t ldb, float* c, int64_t ldc,
                                int64_t k, int64_t rows, int64_t cols, bool accumulate) {
  const float* a[kDotRows];
  const float* b[kDotCols];
  for (int64_t i = 0; i < kDotRows; ++i) a[i] = a0 + (i < rows ? i : 0) * lda;
  for (int64_t i = 0; i < kDotCols; ++i) b[i] = b0 + (i < cols ? i : 0) * ldb;
  const __m512 sum = dot_sums(a, b, k);
  const __m128 sum_rows[kDotRows] = {_mm512_extractf32x4_ps(sum, 0), _mm512_extractf32x4_ps(sum, 1),
                                     _mm512_extractf32x4_ps(sum, 2), _mm512_extractf32x4_ps(sum, 3)};
  const __mmask8 valid = static_cast<__mmask8>((1u << cols) - 1);
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) {
    if (r >= rows) break;
    float* out = c + r * ldc;
    _mm_mask_storeu_ps(out, valid, accumulate ? _mm_add_ps(sum_rows[r], _mm_maskz_loadu_ps(valid, out)) : sum_rows[r]);
  }
}

void dot_tile(const F32DotArgs& t) {
  const float* a = t.a;
  const int64_t lda = t.lda, ldb = t.ldb, ldc = t.ldc, k = t.k;
  const bool whole_rows = t.rows == kDotRows;
  int64_t j = 0;
  if (whole_rows) {
    for (; j + kDotCols <= t.cols; j += kDotCols) dot_block(a, lda, t.b + j * ldb, ldb, t.c + j, ldc, k, t.accumulate);
  }
  for (; j < t.cols; j += kDotCols) {
    dot_edge(a, lda, t.b + j * ldb, ldb, t.c + j, ldc, k, t.rows, std::min(kDotCols, t.cols - j), t.accumulate);
  }
}

}  // namespace

extern const F32Gemm kGemmAvx512 = {kRows, 48, tile_entry, transpose_avx2, kDotRows, kDotCols, dot_tile, true};

}  // namespace demi::backend::cpu::isa

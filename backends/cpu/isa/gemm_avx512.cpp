// The packed fp32 GEMM tile on AVX-512F (compiled with -mavx512f ...): 8 rows x 48 columns, 24 zmm
// accumulators, masked column edges and narrower tiles (32, 16) for the last columns, so that a
// 64-wide row does not run as two 48-wide tiles. Whole-width tiles load B unmasked, with the row
// pointers stepped rather than recomputed: masked loads and the index arithmetic held the loop at
// 75-80% of a core's FMA peak on an AMX Xeon, against 93% now with B in L1 (packed_gemm.cpp).
// Also the 4 x 4 dot tile (isa.h) for products of two k-contiguous operands.
#include <immintrin.h>

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

// The dot tile: a 4 x 4 block of C as 16 accumulators of 16 partial sums along k, which one
// shuffle tree (15 steps of two shuffles and an add) folds into one vector of the 16 sums at the
// end. Rows past `rows` (columns past `cols`) read row 0 again and are dropped.
constexpr int64_t kDotRows = 4, kDotCols = 4;  // 16 accumulators

// One step of k (16 values, lanes past `m` zero) for the block: acc[4 * c + r] += a[r] * b[c], so
// that fold16 leaves row r of the block in 128-bit lane r.
// Inlined into dot_tile with acc in its registers (a lambda capturing acc kept it on the stack).
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

void dot_tile(const F32DotArgs& t) {
  const float* a[kDotRows];
  const float* b[kDotCols];
  for (int64_t i = 0; i < kDotRows; ++i) a[i] = t.a + (i < t.rows ? i : 0) * t.lda;
  for (int64_t i = 0; i < kDotCols; ++i) b[i] = t.b + (i < t.cols ? i : 0) * t.ldb;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= t.k; j += 16) dot_step(acc, a, b, j, 0xffff);
  if (j < t.k) dot_step(acc, a, b, j, lane_mask(t.k - j));
  // Row r of the block is 128-bit lane r of the fold: one masked load, add and store a row (16
  // scalar read-modify-writes were a tenth of a 256-deep call).
  const __m512 sum = fold16(acc);
  const __m128 rows[kDotRows] = {_mm512_extractf32x4_ps(sum, 0), _mm512_extractf32x4_ps(sum, 1),
                                 _mm512_extractf32x4_ps(sum, 2), _mm512_extractf32x4_ps(sum, 3)};
  const __mmask8 cols = static_cast<__mmask8>((1u << t.cols) - 1);
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) {
    if (r >= t.rows) break;
    float* out = t.c + r * t.ldc;
    _mm_mask_storeu_ps(out, cols, t.accumulate ? _mm_add_ps(rows[r], _mm_maskz_loadu_ps(cols, out)) : rows[r]);
  }
}

}  // namespace

extern const F32Gemm kGemmAvx512 = {kRows, 48, tile_entry, transpose_avx2, kDotRows, kDotCols, dot_tile, true};

}  // namespace demi::backend::cpu::isa

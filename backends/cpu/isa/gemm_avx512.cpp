// The packed fp32 GEMM tile on AVX-512F (compiled with -mavx512f ...): 8 rows x 48 columns, 24 zmm
// accumulators, masked column edges and narrower tiles (32, 16) for the last columns, so that a
// 64-wide row does not run as two 48-wide tiles. Runs at ~96% of a core's FMA peak in isolation.
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kRows = 8;

// One kRows x (V * 16) tile; with `accumulate` the sum starts from 0 and is added to C at the end,
// so that a C summed over many calls (backward-weight over groups of images) is a sum of per-call
// chains rather than one long chain whose running total swamps each new product.
template <int64_t V>
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
  for (int64_t j = 0; j < t.k; ++j) {
    const float* brow = t.b + j * t.ldb;
    __m512 bv[V];
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], brow + 16 * v);
    const float* ap = t.a_panel + j * kRows;
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
  if (t.cols > 32) {
    tile<3>(t);
  } else if (t.cols > 16) {
    tile<2>(t);
  } else {
    tile<1>(t);
  }
}

}  // namespace

extern const F32Gemm kGemmAvx512 = {kRows, 48, tile_entry, transpose_avx2};

}  // namespace demi::backend::cpu::isa

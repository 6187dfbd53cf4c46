// The bf16 GEMM tile on AVX512_BF16 (compiled with -mavx512bf16 ...): 8 rows x 48 columns of fp32
// accumulators, each vdpbf16ps adding two exact bf16 products per lane in fp32 (twice the multiplies
// of an fp32 FMA). A pair of A values is broadcast as one 32-bit lane; B is in pairs (isa.h).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kRows = 8;

template <int64_t V>
void tile(const Bf16TileArgs& t) {
  __mmask16 mask[V];
  for (int64_t v = 0; v < V; ++v) mask[v] = lane_mask(t.cols - 16 * v);
  __m512 acc[kRows][V];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
    const __m512 start = t.init && !t.accumulate && r < t.rows ? _mm512_set1_ps(t.init[r]) : _mm512_setzero_ps();
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) acc[r][v] = start;
  }
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const uint16_t* a = t.a + tap * t.kp;
    const uint16_t* b = t.b + (t.b_offsets ? t.b_offsets[tap] : 0);
    for (int64_t j = 0; j < t.kp / 2; ++j) {
      const uint16_t* brow = b + j * t.ldb;
      __m512bh bv[V];
#pragma GCC unroll 3
      for (int64_t v = 0; v < V; ++v) bv[v] = (__m512bh)_mm512_maskz_loadu_epi32(mask[v], brow + 32 * v);
      const uint16_t* ap = a + 2 * j;
#pragma GCC unroll 8
      for (int64_t r = 0; r < kRows; ++r) {  // rows past `rows` are zero in A: computed, never stored
        int32_t pair;
        std::memcpy(&pair, ap + r * t.lda, 4);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 3
        for (int64_t v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
    if (r >= t.rows) break;
#pragma GCC unroll 3
    for (int64_t v = 0; v < V; ++v) {
      if (t.c_bf16) {
        _mm256_mask_storeu_epi16(t.c_bf16 + r * t.ldc + 16 * v, mask[v], bf16_bits(acc[r][v]));
        continue;
      }
      float* out = t.c + r * t.ldc + 16 * v;
      const __m512 sum = t.accumulate ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask[v], out)) : acc[r][v];
      _mm512_mask_storeu_ps(out, mask[v], sum);
    }
  }
}

void tile_entry(const Bf16TileArgs& t) {
  if (t.cols > 32) {
    tile<3>(t);
  } else if (t.cols > 16) {
    tile<2>(t);
  } else {
    tile<1>(t);
  }
}

}  // namespace

extern const Bf16Gemm kBf16Avx512Bf16 = {kRows, 48, 2, nullptr, tile_entry, gather_taps_avx512, im2col16_avx512};

}  // namespace demi::backend::cpu::isa

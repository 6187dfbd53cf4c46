// isa.h's GatherTaps on AVX-512 (compiled with -mavx512f ...): the positions are loaded once, then
// each tap's row is three vpgatherdd of 16 words (the scalar loop ran at one word a cycle, 13% of a
// 7x7 bf16 convolution on Zen 4).
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {

void gather_taps_avx512(const uint32_t* src, const int64_t* offsets, int64_t taps, const int32_t* at, int64_t n,
                        uint32_t* dst, int64_t dst_stride) {
  constexpr int64_t kMaxVectors = 4;  // every bf16 tile's nr is at most 64 columns
  __m512i index[kMaxVectors];
  __mmask16 mask[kMaxVectors];
  const int64_t vectors = (n + 15) / 16;
  for (int64_t v = 0; v < vectors; ++v) {
    mask[v] = lane_mask(n - 16 * v);
    index[v] = _mm512_maskz_loadu_epi32(mask[v], at + 16 * v);
  }
  for (int64_t t = 0; t < taps; ++t) {
    const uint32_t* base = src + offsets[t];
    uint32_t* row = dst + t * dst_stride;
    for (int64_t v = 0; v < vectors; ++v) {
      const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask[v], index[v], base, 4);
      _mm512_mask_storeu_epi32(row + 16 * v, mask[v], words);
    }
  }
}

}  // namespace demi::backend::cpu::isa

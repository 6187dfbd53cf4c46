// isa.h's GatherTaps on AVX-512 (compiled with -mavx512f ...): per 16 columns, the positions are
// loaded once and each tap's row is one vpgatherdd (the scalar loop ran at one word a cycle, 13% of
// a 7x7 bf16 convolution on Zen 4).
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {

void gather_taps_avx512(const uint32_t* src, const int64_t* offsets, int64_t taps, const int32_t* at, int64_t n,
                        uint32_t* dst, int64_t dst_stride) {
  for (int64_t q = 0; q < n; q += 16) {
    const __mmask16 mask = lane_mask(n - q);
    const __m512i index = _mm512_maskz_loadu_epi32(mask, at + q);
    for (int64_t t = 0; t < taps; ++t) {
      const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, index, src + offsets[t], 4);
      _mm512_mask_storeu_epi32(dst + t * dst_stride + q, mask, words);
    }
  }
}

}  // namespace demi::backend::cpu::isa

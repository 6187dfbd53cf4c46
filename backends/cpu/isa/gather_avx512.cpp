// isa.h's GatherTaps and Im2col16 on AVX-512 (compiled with -mavx512f -mavx512bw ...).
// GatherTaps: per 16 columns, the positions are loaded once and each tap's row is one vpgatherdd
// (the scalar loop ran at one word a cycle, 13% of a 7x7 bf16 convolution on Zen 4).
// Im2col16: a plane of up to 64 values is two vectors of 32, and each tap's row is one two-source
// permute (vpermt2w) with the padding lanes zeroed by the mask, per 32 outputs.
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

void im2col16_avx512(const uint16_t* x, int64_t channels, int64_t plane_stride, const Im2colPlan& plan, uint16_t* col,
                     int64_t ld) {
  const __mmask32 in_lo = lane_mask32(plan.n_in), in_hi = lane_mask32(plan.n_in - 32);
  const __mmask32 out_lo = lane_mask32(plan.n_out), out_hi = lane_mask32(plan.n_out - 32);
  const bool two = plan.n_out > 32;
  for (int64_t c = 0; c < channels; ++c) {
    const uint16_t* plane = x + c * plane_stride;
    const __m512i lo = _mm512_maskz_loadu_epi16(in_lo, plane), hi = _mm512_maskz_loadu_epi16(in_hi, plane + 32);
    uint16_t* row = col + c * plan.taps * ld;
    for (int64_t t = 0; t < plan.taps; ++t, row += ld) {
      const uint16_t* index = plan.index + t * Im2colPlan::kMaxValues;
      const uint64_t keep = plan.keep[t];
      const __m512i first = _mm512_maskz_permutex2var_epi16(__mmask32(keep), lo, _mm512_loadu_si512(index), hi);
      _mm512_mask_storeu_epi16(row, out_lo, first);
      if (two) {
        const __m512i second = _mm512_maskz_permutex2var_epi16(__mmask32(keep >> 32), lo, _mm512_loadu_si512(index + 32), hi);
        _mm512_mask_storeu_epi16(row + 32, out_hi, second);
      }
    }
  }
}

}  // namespace demi::backend::cpu::isa

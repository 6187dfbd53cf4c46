// half <-> fp32 conversions with AVX-512 F/BW/VL (compiled with -mavx512f -mavx512bw ...): 16 values a
// step and the tail under a mask, bit for bit the AVX2 and scalar entries' results. Twice the AVX2
// width matters where rows are short (an implicit convolution's output rows are 4 to 32 values).
#include <immintrin.h>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, bf16_bits(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

}  // namespace

extern const Convert kConvertAvx512 = {f16_to_f32, bf16_to_f32, f32_to_f16, f32_to_bf16};

}  // namespace demi::backend::cpu::isa

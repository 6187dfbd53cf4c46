// fp32 -> bf16 by bits, for the AVX-512 and AVX2 variant files: adds 0x7fff plus the lowest kept bit
// and keeps the top 16 bits (round to nearest even); NaN -> quiet NaN. bf16_rounded keeps the result
// as fp32 (the bf16 bits in the top half of each lane), bf16_bits as 16-bit values. vcvtneps2bf16
// would flush fp32 subnormals to zero, which the half contract's one rounding does not. Static, as
// lane_mask.h.
#pragma once

#include <immintrin.h>

namespace demi::backend::cpu::isa {

#if defined(__AVX512F__)
// v rounded to bf16 and widened back: the bf16 bits in the top half of each lane, the rest zero.
static inline __m512 bf16_rounded(__m512 v) {
  const __m512i x = _mm512_castps_si512(v), top = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), top);
  const __m512i nan = _mm512_and_si512(_mm512_or_si512(x, _mm512_set1_epi32(0x400000)), top);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
  return _mm512_castsi512_ps(r);
}
static inline __m256i bf16_bits(__m512 v) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(bf16_rounded(v)), 16));
}
#elif defined(__AVX2__)
// bf16_rounded for 8 lanes.
static inline __m256 bf16_rounded(__m256 v) {
  const __m256i x = _mm256_castps_si256(v), top = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), top);
  const __m256i nan = _mm256_and_si256(_mm256_or_si256(x, _mm256_set1_epi32(0x400000)), top);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))));
}
#endif

}  // namespace demi::backend::cpu::isa

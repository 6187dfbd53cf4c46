// half <-> fp32 conversions with F16C and AVX2 (compiled with -mavx2 -mf16c), 8 values a step; the
// last n % 8 go through the scalar entries. Eigen 3.4's cast<>() runs these element by element.
#include <immintrin.h>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  kConvertScalar.f16_to_f32(src + i, dst + i, n - i);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  kConvertScalar.bf16_to_f32(src + i, dst + i, n - i);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  kConvertScalar.f32_to_f16(src + i, dst + i, n - i);
}

// The bf16 bits of 8 floats, in the low half of each 32-bit lane (bf16_bits.h).
__m256i bf16_bits(const float* src) {
  return _mm256_srli_epi32(_mm256_castps_si256(bf16_rounded(_mm256_loadu_ps(src))), 16);
}

// 16 values a step, two vectors packed by one pack and one permute into one store.
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed = _mm256_packus_epi32(bf16_bits(src + i), bf16_bits(src + i + 8));  // lanes 0-3 8-11 4-7 12-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  if (i + 8 <= n) {
    const __m256i r = bf16_bits(src + i);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
    i += 8;
  }
  kConvertScalar.f32_to_bf16(src + i, dst + i, n - i);
}

}  // namespace

extern const Convert kConvertAvx2 = {f16_to_f32, bf16_to_f32, f32_to_f16, f32_to_bf16};

}  // namespace demi::backend::cpu::isa

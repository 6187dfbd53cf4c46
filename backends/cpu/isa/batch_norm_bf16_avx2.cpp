// Batch norm's bf16 passes (isa.h, BatchNormBf16), compiled with -mavx2 -mfma: the loops of
// batch_norm_bf16.h, vectorised by the compiler, but for `normalize`, whose ReLU and rounding GCC
// turns into a tangle of masks (1.25-1.4x the time of normalising into fp32 and rounding after).
#include <immintrin.h>

#include "backends/cpu/isa/batch_norm_bf16.h"
#include "backends/cpu/isa/bf16_bits.h"

namespace demi::backend::cpu::isa {
namespace {

// 8 values of x normalised, with values below -relu_band as +0 when relu.
inline __m256 normalized8(const uint16_t* x, __m256 hi, __m256 lo, __m256 scale, __m256 shift, bool relu,
                          __m256 neg_band) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(v, hi), lo), scale), shift);
  return relu ? _mm256_andnot_ps(_mm256_cmp_ps(v, neg_band, _CMP_LT_OQ), v) : v;
}

void normalize(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const __m256 hi = _mm256_set1_ps(k.hi), lo = _mm256_set1_ps(k.lo), scale = _mm256_set1_ps(k.scale);
  const __m256 shift = _mm256_set1_ps(k.shift), neg_band = _mm256_set1_ps(-relu_band);
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r0 = _mm256_srli_epi32(
        _mm256_castps_si256(bf16_rounded(normalized8(x + i, hi, lo, scale, shift, relu, neg_band))), 16);
    const __m256i r1 = _mm256_srli_epi32(
        _mm256_castps_si256(bf16_rounded(normalized8(x + i + 8, hi, lo, scale, shift, relu, neg_band))), 16);
    const __m256i packed = _mm256_packus_epi32(r0, r1);  // lanes 0-3 8-11 4-7 12-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  bn_normalize(x + i, y + i, n - i, k, relu_band);
}

}  // namespace

extern const BatchNormBf16 kBatchNormBf16Avx2 = {bn_sum, bn_sum_squared_deviations, normalize, bn_gradient_sums,
                                                 bn_grad_input};

}  // namespace demi::backend::cpu::isa

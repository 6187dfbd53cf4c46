// Batch norm's bf16 passes (isa.h, BatchNormBf16), compiled with -mavx512f ...: the loops of
// batch_norm_bf16.h, vectorised by the compiler, but for `normalize`, whose ReLU and rounding are
// written out here (as compiled from the loop they took more instructions than the two steps of
// normalising into fp32 and rounding after).
#include <immintrin.h>

#include "backends/cpu/isa/batch_norm_bf16.h"
#include "backends/cpu/isa/bf16_bits.h"

namespace demi::backend::cpu::isa {
namespace {

void normalize(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const __m512 hi = _mm512_set1_ps(k.hi), lo = _mm512_set1_ps(k.lo), scale = _mm512_set1_ps(k.scale);
  const __m512 shift = _mm512_set1_ps(k.shift), neg_band = _mm512_set1_ps(-relu_band);
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(v, hi), lo), scale), shift);
    if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, neg_band, _CMP_LT_OQ), _mm512_setzero_ps());
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bf16_bits(v));
  }
  bn_normalize(x + i, y + i, n - i, k, relu_band);
}

}  // namespace

extern const BatchNormBf16 kBatchNormBf16Avx512 = {bn_sum, bn_sum_squared_deviations, normalize, bn_gradient_sums,
                                                   bn_grad_input};

}  // namespace demi::backend::cpu::isa

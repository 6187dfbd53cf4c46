// GELU's normal CDF and PDF on AVX2 + FMA (compiled with -mavx2 -mfma), 4 doubles a vector, the
// same arithmetic as gelu_avx512.cpp; the last n % 4 values go through the scalar entry.
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

__m256d set(double v) { return _mm256_set1_pd(v); }

// e^a for a <= 0 (below -708: 0 in fp32 anyway); NaN stays NaN.
__m256d exp_nonpositive(__m256d a) {
  a = _mm256_max_pd(set(-708.0), a);  // NaN in the second operand comes through
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(a, set(1.4426950408889634074)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, set(6.93147180369123816490e-01), a);  // a - k ln2, in two parts
  r = _mm256_fnmadd_pd(k, set(1.90821492927058770002e-10), r);
  __m256d p = set(1.0 / 362880);
  constexpr double kInverseFactorials[9] = {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  for (double c : kInverseFactorials) p = _mm256_fmadd_pd(p, r, set(c));
  const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));  // |k| <= 1022
  const __m256i scale = _mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(scale));
}

void normal_cdf_pdf(const float* x, float* cdf, float* pdf, int64_t n) {
  const __m256d one = set(1.0), half = set(0.5);
  const __m256d sign = set(-0.0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d z = _mm256_mul_pd(_mm256_andnot_pd(sign, xd), set(kGeluSqrtHalf));
    const __m256d t = _mm256_div_pd(one, _mm256_fmadd_pd(half, z, one));
    __m256d p = set(kGeluErfc[9]);
    for (int j = 8; j >= 0; --j) p = _mm256_fmadd_pd(t, p, set(kGeluErfc[j]));
    const __m256d zz = _mm256_mul_pd(z, z);
    const __m256d h = _mm256_mul_pd(_mm256_mul_pd(half, t), exp_nonpositive(_mm256_sub_pd(p, zz)));
    const __m256d negative = _mm256_cmp_pd(xd, _mm256_setzero_pd(), _CMP_LT_OQ);
    _mm_storeu_ps(cdf + i, _mm256_cvtpd_ps(_mm256_blendv_pd(_mm256_sub_pd(one, h), h, negative)));
    if (pdf) {
      const __m256d phi = _mm256_mul_pd(exp_nonpositive(_mm256_sub_pd(_mm256_setzero_pd(), zz)), set(kGeluInvSqrt2Pi));
      _mm_storeu_ps(pdf + i, _mm256_cvtpd_ps(phi));
    }
  }
  kGeluScalar.normal_cdf_pdf(x + i, cdf + i, pdf ? pdf + i : nullptr, n - i);
}

}  // namespace

extern const Gelu kGeluAvx2 = {normal_cdf_pdf, normal_cdf_pdf};  // no fp32 variant measured on AVX2

}  // namespace demi::backend::cpu::isa

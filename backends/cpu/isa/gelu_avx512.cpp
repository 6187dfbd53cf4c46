// GELU's normal CDF and PDF on AVX-512F (compiled with -mavx512f ...), 8 doubles a vector, with an
// exp of relative error ~1e-11 (Cody-Waite reduction by ln 2, degree-9 polynomial); Eigen's
// vectorised exp cannot be used here (its inline code would be instantiated with AVX-512 flags).
// For half outputs, the same formula in fp32, 16 floats a vector, with a degree-6 exp.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

__m512d set(double v) { return _mm512_set1_pd(v); }

// e^a for a <= 0 (below -708, the smallest normal scale: 0 in fp32 anyway); NaN stays NaN.
__m512d exp_nonpositive(__m512d a) {
  a = _mm512_max_pd(set(-708.0), a);  // NaN in the second operand comes through
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(a, set(1.4426950408889634074)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, set(6.93147180369123816490e-01), a);  // a - k ln2, in two parts
  r = _mm512_fnmadd_pd(k, set(1.90821492927058770002e-10), r);
  __m512d p = set(1.0 / 362880);
  constexpr double kInverseFactorials[9] = {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  for (double c : kInverseFactorials) p = _mm512_fmadd_pd(p, r, set(c));
  const __m512i scale = _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtpd_epi64(k), _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(scale));
}

void normal_cdf_pdf(const float* x, float* cdf, float* pdf, int64_t n) {
  const __m512d one = set(1.0), half = set(0.5);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = static_cast<__mmask8>(lane_mask(n - i));
    const __m512d xd = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + i));
    const __m512d z = _mm512_mul_pd(_mm512_abs_pd(xd), set(kGeluSqrtHalf));
    const __m512d t = _mm512_div_pd(one, _mm512_fmadd_pd(half, z, one));
    __m512d p = set(kGeluErfc[9]);
    for (int j = 8; j >= 0; --j) p = _mm512_fmadd_pd(t, p, set(kGeluErfc[j]));
    const __m512d zz = _mm512_mul_pd(z, z);
    const __m512d h = _mm512_mul_pd(_mm512_mul_pd(half, t), exp_nonpositive(_mm512_sub_pd(p, zz)));
    const __mmask8 negative = _mm512_cmp_pd_mask(xd, _mm512_setzero_pd(), _CMP_LT_OQ);
    _mm256_mask_storeu_ps(cdf + i, m, _mm512_cvtpd_ps(_mm512_mask_blend_pd(negative, _mm512_sub_pd(one, h), h)));
    if (pdf) {
      const __m512d phi = _mm512_mul_pd(exp_nonpositive(_mm512_sub_pd(_mm512_setzero_pd(), zz)), set(kGeluInvSqrt2Pi));
      _mm256_mask_storeu_ps(pdf + i, m, _mm512_cvtpd_ps(phi));
    }
  }
}

__m512 set_ps(float v) { return _mm512_set1_ps(v); }

// e^a in fp32 for a <= 0: 0 below -87 (fp32's normal range ends at e^-87.3); NaN stays NaN. Relative
// error ~2e-7: Cody-Waite reduction by ln 2 in two parts, then the degree-6 Taylor polynomial.
__m512 exp_nonpositive_ps(__m512 a) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(a, set_ps(-87.0f), _CMP_LT_OQ);
  a = _mm512_max_ps(set_ps(-87.0f), a);  // NaN in the second operand comes through
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(a, set_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, set_ps(0.693359375f), a);
  r = _mm512_fnmadd_ps(k, set_ps(-2.12194440e-4f), r);
  __m512 p = set_ps(1.0f / 720);
  constexpr float kInverseFactorials[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (float c : kInverseFactorials) p = _mm512_fmadd_ps(p, r, set_ps(c));
  const __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~underflow), p, _mm512_castsi512_ps(scale));
}

void normal_cdf_pdf_half(const float* x, float* cdf, float* pdf, int64_t n) {
  const __m512 one = set_ps(1.0f), half = set_ps(0.5f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 z = _mm512_mul_ps(_mm512_abs_ps(xv), set_ps(static_cast<float>(kGeluSqrtHalf)));
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(half, z, one));
    __m512 p = set_ps(static_cast<float>(kGeluErfc[9]));
    for (int j = 8; j >= 0; --j) p = _mm512_fmadd_ps(t, p, set_ps(static_cast<float>(kGeluErfc[j])));
    // z^2 = x^2 / 2 exactly, as zz + zz_lo (from x, not from the rounded z): in the tail (z^2 ~ 70)
    // an error of one fp32 rounding in z^2 is 8e-6 of the result.
    const __m512 xx = _mm512_mul_ps(xv, xv);
    const __mmask16 finite = _mm512_cmp_ps_mask(xx, set_ps(INFINITY), _CMP_LT_OQ);  // inf - inf would be NaN
    const __m512 zz = _mm512_mul_ps(half, xx), zz_lo = _mm512_maskz_mul_ps(finite, half, _mm512_fmsub_ps(xv, xv, xx));
    const __m512 h = _mm512_mul_ps(_mm512_mul_ps(half, t), exp_nonpositive_ps(_mm512_sub_ps(_mm512_sub_ps(p, zz), zz_lo)));
    const __mmask16 negative = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ);
    _mm512_mask_storeu_ps(cdf + i, m, _mm512_mask_blend_ps(negative, _mm512_sub_ps(one, h), h));
    if (pdf) {
      const __m512 phi = _mm512_mul_ps(exp_nonpositive_ps(_mm512_sub_ps(_mm512_sub_ps(_mm512_setzero_ps(), zz), zz_lo)),
                                       set_ps(static_cast<float>(kGeluInvSqrt2Pi)));
      _mm512_mask_storeu_ps(pdf + i, m, phi);
    }
  }
}

}  // namespace

extern const Gelu kGeluAvx512 = {normal_cdf_pdf, normal_cdf_pdf_half};

}  // namespace demi::backend::cpu::isa

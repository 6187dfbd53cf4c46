// GELU's normal CDF and PDF on AVX2 + FMA (compiled with -mavx2 -mfma), 4 doubles a vector, the
// same arithmetic as gelu_avx512.cpp but for t = 1 / d by division (AVX2 has no double reciprocal
// estimate); the last n % 4 values go through the scalar entry.
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

__m256d set(double v) { return _mm256_set1_pd(v); }

// As in gelu_avx512.cpp: kChains vectors go through each step side by side, so that their long
// chains of dependent FMAs (erfc's polynomial, then exp's) overlap (AirNet's fp32 GELUs at level
// avx2 on an AMX Xeon: 13.3 -> 10.6 ms forward, 17.4-18.2 -> 15.4-15.8 backward; 2 and 4 gained less).
constexpr int kChains = 8;

// e^a for a <= 0 (below -708: 0 in fp32 anyway); NaN stays NaN. In place.
template <int chains>
[[gnu::always_inline]] inline void exp_nonpositive(__m256d (&a)[chains]) {
  __m256d k[chains], r[chains];
  for (int u = 0; u < chains; ++u) {
    a[u] = _mm256_max_pd(set(-708.0), a[u]);  // NaN in the second operand comes through
    k[u] = _mm256_round_pd(_mm256_mul_pd(a[u], set(1.4426950408889634074)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[u] = _mm256_fnmadd_pd(k[u], set(6.93147180369123816490e-01), a[u]);  // a - k ln2, in two parts
    r[u] = _mm256_fnmadd_pd(k[u], set(1.90821492927058770002e-10), r[u]);
    a[u] = set(1.0 / 362880);
  }
  constexpr double kInverseFactorials[9] = {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  for (double c : kInverseFactorials) {
    for (int u = 0; u < chains; ++u) a[u] = _mm256_fmadd_pd(a[u], r[u], set(c));
  }
  for (int u = 0; u < chains; ++u) {
    const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k[u]));  // |k| <= 1022
    const __m256i scale = _mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52);
    a[u] = _mm256_mul_pd(a[u], _mm256_castsi256_pd(scale));
  }
}

// 4 * chains values from x.
template <int chains>
[[gnu::always_inline]] inline void cdf_pdf_block(const float* x, float* cdf, float* pdf) {
  const __m256d one = set(1.0), half = set(0.5), sign = set(-0.0);
  __m256d xd[chains], t[chains], e[chains], h[chains];
  for (int u = 0; u < chains; ++u) {
    xd[u] = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * u));
    const __m256d z = _mm256_mul_pd(_mm256_andnot_pd(sign, xd[u]), set(kGeluSqrtHalf));
    e[u] = _mm256_fnmadd_pd(z, z, _mm256_setzero_pd());  // -z^2
    t[u] = _mm256_div_pd(one, _mm256_fmadd_pd(half, z, one));
  }
  // h = erfc(z) / 2 = t exp(P(t) - z^2) / 2 = t Q(t) exp(-z^2) / 2
  if (pdf) {  // exp(-z^2) serves both, with Q (degree 14) for exp(P)
    exp_nonpositive(e);
    for (int u = 0; u < chains; ++u) {
      _mm_storeu_ps(pdf + 4 * u, _mm256_cvtpd_ps(_mm256_mul_pd(e[u], set(kGeluInvSqrt2Pi))));
      h[u] = set(kGeluExpP[14]);
    }
    for (int j = 13; j >= 0; --j) {
      for (int u = 0; u < chains; ++u) h[u] = _mm256_fmadd_pd(t[u], h[u], set(kGeluExpP[j]));
    }
    for (int u = 0; u < chains; ++u) h[u] = _mm256_mul_pd(h[u], e[u]);
  } else {  // one exp either way: P (degree 9) costs less than Q
    for (int u = 0; u < chains; ++u) h[u] = set(kGeluErfc[9]);
    for (int j = 8; j >= 0; --j) {
      for (int u = 0; u < chains; ++u) h[u] = _mm256_fmadd_pd(t[u], h[u], set(kGeluErfc[j]));
    }
    for (int u = 0; u < chains; ++u) h[u] = _mm256_add_pd(h[u], e[u]);
    exp_nonpositive(h);
  }
  for (int u = 0; u < chains; ++u) {
    h[u] = _mm256_mul_pd(_mm256_mul_pd(half, t[u]), h[u]);
    const __m256d negative = _mm256_cmp_pd(xd[u], _mm256_setzero_pd(), _CMP_LT_OQ);
    _mm_storeu_ps(cdf + 4 * u, _mm256_cvtpd_ps(_mm256_blendv_pd(_mm256_sub_pd(one, h[u]), h[u], negative)));
  }
}

void normal_cdf_pdf(const float* x, float* cdf, float* pdf, int64_t n) {
  int64_t i = 0;
  for (; i + 4 * kChains <= n; i += 4 * kChains) cdf_pdf_block<kChains>(x + i, cdf + i, pdf ? pdf + i : nullptr);
  for (; i + 4 <= n; i += 4) cdf_pdf_block<1>(x + i, cdf + i, pdf ? pdf + i : nullptr);
  kGeluScalar.normal_cdf_pdf(x + i, cdf + i, pdf ? pdf + i : nullptr, n - i);
}

}  // namespace

extern const Gelu kGeluAvx2 = {normal_cdf_pdf, normal_cdf_pdf};  // no fp32 variant measured on AVX2

}  // namespace demi::backend::cpu::isa

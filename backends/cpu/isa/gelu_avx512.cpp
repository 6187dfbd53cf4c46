// GELU's normal CDF and PDF on AVX-512F (compiled with -mavx512f ...), 8 doubles a vector, with an
// exp of relative error ~1e-11 (Cody-Waite reduction by ln 2, degree-9 polynomial); Eigen's
// vectorised exp cannot be used here (its inline code would be instantiated with AVX-512 flags).
// For half outputs, the same formula in fp32, 16 floats a vector, with a degree-6 exp, and GELU itself
// with the half type's roundings in registers (gelu_half).
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

__m512d set(double v) { return _mm512_set1_pd(v); }

// Each vector is one long chain of dependent FMAs (erfc's polynomial, then exp's): kChains vectors go
// through each step side by side, so that their chains overlap (AirNet's fp32 GELUs, forward and
// backward, 30% faster with 8 than with 1; 2 to 6 gained less, 12 and 16 spilled registers).
constexpr int kChains = 8;
using Chains = __m512d[kChains];

// e^a for a <= 0 (below -708, the smallest normal scale: 0 in fp32 anyway); NaN stays NaN. In place.
[[gnu::always_inline]] inline void exp_nonpositive(Chains& a) {
  __m512d k[kChains], r[kChains];
  for (int u = 0; u < kChains; ++u) {
    a[u] = _mm512_max_pd(set(-708.0), a[u]);  // NaN in the second operand comes through
    k[u] = _mm512_roundscale_pd(_mm512_mul_pd(a[u], set(1.4426950408889634074)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[u] = _mm512_fnmadd_pd(k[u], set(6.93147180369123816490e-01), a[u]);  // a - k ln2, in two parts
    r[u] = _mm512_fnmadd_pd(k[u], set(1.90821492927058770002e-10), r[u]);
    a[u] = set(1.0 / 362880);
  }
  constexpr double kInverseFactorials[9] = {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  for (double c : kInverseFactorials) {
    for (int u = 0; u < kChains; ++u) a[u] = _mm512_fmadd_pd(a[u], r[u], set(c));
  }
  // times 2^k by vscalefpd (one instruction for the integer route's four; the same product: 2^k and
  // the result are normal)
  for (int u = 0; u < kChains; ++u) a[u] = _mm512_scalef_pd(a[u], k[u]);
}

void normal_cdf_pdf(const float* x, float* cdf, float* pdf, int64_t n) {
  const __m512d one = set(1.0), half = set(0.5);
  for (int64_t i = 0; i < n; i += 8 * kChains) {
    __mmask8 m[kChains];
    __m512d xd[kChains], t[kChains];
    Chains e;
    for (int u = 0; u < kChains; ++u) {
      m[u] = static_cast<__mmask8>(n - i > 8 * u ? lane_mask(n - i - 8 * u) : 0);
      xd[u] = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m[u], x + i + 8 * u));
      const __m512d z = _mm512_mul_pd(_mm512_abs_pd(xd[u]), set(kGeluSqrtHalf));
      e[u] = _mm512_fnmadd_pd(z, z, _mm512_setzero_pd());  // -z^2
      // t = 1 / d by rcp14 and two Newton steps (2^-14 -> 2^-28 -> 2^-56; the divider took longer);
      // z capped so that an infinite x gives t ~ 0, not inf * 0 = NaN in the Newton step.
      const __m512d d = _mm512_fmadd_pd(half, _mm512_min_pd(set(1e10), z), one);
      t[u] = _mm512_rcp14_pd(d);
      t[u] = _mm512_fmadd_pd(t[u], _mm512_fnmadd_pd(d, t[u], one), t[u]);
      t[u] = _mm512_fmadd_pd(t[u], _mm512_fnmadd_pd(d, t[u], one), t[u]);
    }
    __m512d h[kChains];  // erfc(z) / 2 = t exp(P(t) - z^2) / 2 = t Q(t) exp(-z^2) / 2
    if (pdf) {  // exp(-z^2) serves both, with Q (degree 14) for exp(P)
      exp_nonpositive(e);
      for (int u = 0; u < kChains; ++u) {
        _mm256_mask_storeu_ps(pdf + i + 8 * u, m[u], _mm512_cvtpd_ps(_mm512_mul_pd(e[u], set(kGeluInvSqrt2Pi))));
        h[u] = set(kGeluExpP[14]);
      }
      for (int j = 13; j >= 0; --j) {
        for (int u = 0; u < kChains; ++u) h[u] = _mm512_fmadd_pd(t[u], h[u], set(kGeluExpP[j]));
      }
      for (int u = 0; u < kChains; ++u) h[u] = _mm512_mul_pd(h[u], e[u]);
    } else {  // one exp either way: P (degree 9) costs less than Q
      for (int u = 0; u < kChains; ++u) h[u] = set(kGeluErfc[9]);
      for (int j = 8; j >= 0; --j) {
        for (int u = 0; u < kChains; ++u) h[u] = _mm512_fmadd_pd(t[u], h[u], set(kGeluErfc[j]));
      }
      for (int u = 0; u < kChains; ++u) h[u] = _mm512_add_pd(h[u], e[u]);
      exp_nonpositive(h);
    }
    for (int u = 0; u < kChains; ++u) {
      h[u] = _mm512_mul_pd(_mm512_mul_pd(half, t[u]), h[u]);
      const __mmask8 negative = _mm512_cmp_pd_mask(xd[u], _mm512_setzero_pd(), _CMP_LT_OQ);
      const __m512d value = _mm512_mask_blend_pd(negative, _mm512_sub_pd(one, h[u]), h[u]);
      _mm256_mask_storeu_ps(cdf + i + 8 * u, m[u], _mm512_cvtpd_ps(value));
    }
  }
}

__m512 set_ps(float v) { return _mm512_set1_ps(v); }
// As kChains, for the fp32 arithmetic (AirNet's bf16 GELUs 5-10% faster with 4 than with 1; 8 spilled).
constexpr int kHalfChains = 4;
using ChainsPs = __m512[kHalfChains];

// e^a in fp32 for a <= 0: 0 below -87 (fp32's normal range ends at e^-87.3); NaN stays NaN. Relative
// error ~2e-7: Cody-Waite reduction by ln 2 in two parts, then the degree-6 Taylor polynomial. In place.
[[gnu::always_inline]] inline void exp_nonpositive_ps(ChainsPs& a) {
  __m512 k[kHalfChains], r[kHalfChains];
  __mmask16 underflow[kHalfChains];
  for (int u = 0; u < kHalfChains; ++u) {
    underflow[u] = _mm512_cmp_ps_mask(a[u], set_ps(-87.0f), _CMP_LT_OQ);
    a[u] = _mm512_max_ps(set_ps(-87.0f), a[u]);  // NaN in the second operand comes through
    k[u] = _mm512_roundscale_ps(_mm512_mul_ps(a[u], set_ps(1.44269504f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[u] = _mm512_fnmadd_ps(k[u], set_ps(0.693359375f), a[u]);
    r[u] = _mm512_fnmadd_ps(k[u], set_ps(-2.12194440e-4f), r[u]);
    a[u] = set_ps(1.0f / 720);
  }
  constexpr float kInverseFactorials[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (float c : kInverseFactorials) {
    for (int u = 0; u < kHalfChains; ++u) a[u] = _mm512_fmadd_ps(a[u], r[u], set_ps(c));
  }
  // times 2^k by vscalefps (one instruction for the integer route's four; the same product: 2^k and
  // the result are normal)
  for (int u = 0; u < kHalfChains; ++u) a[u] = _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow[u]), a[u], k[u]);
}

// Phi and, with `with_pdf`, phi of kHalfChains vectors x in fp32, 35 operations a vector for Phi:
// - h = Phi(-|x|) = erfc(z) / 2 = t' exp(P(t) - z^2) with t' = t / 2 = 1 / (2 + |x| / sqrt 2), and P's
//   coefficients scaled by powers of two to take t' (exact: the same roundings as in t);
// - P(t) - z^2 = P - (x / 2) x by one FMA: the exponent rounded once (the exact product inside the FMA),
//   which in the tail (z^2 ~ 70) is within 2^-18 of the result, as before with x^2 / 2 split in two.
[[gnu::always_inline]] inline void cdf_pdf_half(const ChainsPs& x, ChainsPs& cdf, ChainsPs& pdf, bool with_pdf) {
  const __m512 one = set_ps(1.0f);
  __m512 t[kHalfChains], half_x[kHalfChains];
  ChainsPs& e = cdf;
  for (int u = 0; u < kHalfChains; ++u) {
    t[u] = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_abs_ps(x[u]), set_ps(static_cast<float>(kGeluSqrtHalf)), set_ps(2.0f)));
    half_x[u] = _mm512_mul_ps(set_ps(0.5f), x[u]);
    e[u] = set_ps(static_cast<float>(kGeluErfc[9] * 512));
  }
  for (int j = 8; j >= 0; --j) {
    const __m512 c = set_ps(static_cast<float>(kGeluErfc[j] * (1 << j)));
    for (int u = 0; u < kHalfChains; ++u) e[u] = _mm512_fmadd_ps(t[u], e[u], c);
  }
  for (int u = 0; u < kHalfChains; ++u) e[u] = _mm512_fnmadd_ps(half_x[u], x[u], e[u]);  // inf: -inf, e^-inf = 0
  exp_nonpositive_ps(e);
  for (int u = 0; u < kHalfChains; ++u) {
    const __m512 h = _mm512_mul_ps(t[u], e[u]);
    const __mmask16 negative = _mm512_cmp_ps_mask(x[u], _mm512_setzero_ps(), _CMP_LT_OQ);
    cdf[u] = _mm512_mask_blend_ps(negative, _mm512_sub_ps(one, h), h);
  }
  if (with_pdf) {
    for (int u = 0; u < kHalfChains; ++u) pdf[u] = _mm512_fnmadd_ps(half_x[u], x[u], _mm512_setzero_ps());
    exp_nonpositive_ps(pdf);
    for (int u = 0; u < kHalfChains; ++u) pdf[u] = _mm512_mul_ps(pdf[u], set_ps(static_cast<float>(kGeluInvSqrt2Pi)));
  }
}

void normal_cdf_pdf_half(const float* x, float* cdf, float* pdf, int64_t n) {
  for (int64_t i = 0; i < n; i += 16 * kHalfChains) {
    __mmask16 m[kHalfChains];
    ChainsPs xv, c, p;
    for (int u = 0; u < kHalfChains; ++u) {
      m[u] = n - i > 16 * u ? lane_mask(n - i - 16 * u) : 0;
      xv[u] = _mm512_maskz_loadu_ps(m[u], x + i + 16 * u);
    }
    cdf_pdf_half(xv, c, p, pdf != nullptr);
    for (int u = 0; u < kHalfChains; ++u) {
      _mm512_mask_storeu_ps(cdf + i + 16 * u, m[u], c[u]);
      if (pdf) _mm512_mask_storeu_ps(pdf + i + 16 * u, m[u], p[u]);
    }
  }
}

// v rounded to the half type and widened back, as the convert entries would store and load it.
inline __m512 round_to(HalfType type, __m512 v) {
  if (type == HalfType::F16) return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return bf16_rounded(v);
}

void gelu_half(const float* x, const float* g, float* y, int64_t n, HalfType type, bool round_x, bool round_y) {
  for (int64_t i = 0; i < n; i += 16 * kHalfChains) {
    __mmask16 m[kHalfChains];
    ChainsPs xv, c, p;
    for (int u = 0; u < kHalfChains; ++u) {
      m[u] = n - i > 16 * u ? lane_mask(n - i - 16 * u) : 0;
      xv[u] = _mm512_maskz_loadu_ps(m[u], x + i + 16 * u);
      if (round_x) xv[u] = round_to(type, xv[u]);
    }
    cdf_pdf_half(xv, c, p, g != nullptr);
    for (int u = 0; u < kHalfChains; ++u) {
      __m512 v = g ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m[u], g + i + 16 * u), _mm512_fmadd_ps(xv[u], p[u], c[u]))
                   : _mm512_mul_ps(xv[u], c[u]);
      if (round_y) v = round_to(type, v);
      _mm512_mask_storeu_ps(y + i + 16 * u, m[u], v);
    }
  }
}

}  // namespace

extern const Gelu kGeluAvx512 = {normal_cdf_pdf, normal_cdf_pdf_half, gelu_half};

}  // namespace demi::backend::cpu::isa

// GELU's normal CDF and PDF on AVX2 + FMA (compiled with -mavx2 -mfma), 4 doubles a vector, the
// same arithmetic as gelu_avx512.cpp but for t = 1 / d by division (AVX2 has no double reciprocal
// estimate); the last n % 4 values go through the scalar entry. For half outputs, gelu_avx512.cpp's
// fp32 formula and gelu_half, 8 floats a vector.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

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

__m256 set_ps(float v) { return _mm256_set1_ps(v); }
// As kChains, for the fp32 arithmetic: 4 as on AVX-512 (2 ran no differently on an AVX2-only EPYC).
constexpr int kHalfChains = 4;
using ChainsPs = __m256[kHalfChains];

// e^a in fp32 for a <= 0, as gelu_avx512.cpp's exp_nonpositive_ps: 0 below -87; NaN stays NaN;
// relative error ~2e-7. In place.
[[gnu::always_inline]] inline void exp_nonpositive_ps(ChainsPs& a) {
  __m256 k[kHalfChains], r[kHalfChains], underflow[kHalfChains];
  for (int u = 0; u < kHalfChains; ++u) {
    underflow[u] = _mm256_cmp_ps(a[u], set_ps(-87.0f), _CMP_LT_OQ);
    a[u] = _mm256_max_ps(set_ps(-87.0f), a[u]);  // NaN in the second operand comes through
    k[u] = _mm256_round_ps(_mm256_mul_ps(a[u], set_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[u] = _mm256_fnmadd_ps(k[u], set_ps(0.693359375f), a[u]);
    r[u] = _mm256_fnmadd_ps(k[u], set_ps(-2.12194440e-4f), r[u]);
    a[u] = set_ps(1.0f / 720);
  }
  constexpr float kInverseFactorials[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (float c : kInverseFactorials) {
    for (int u = 0; u < kHalfChains; ++u) a[u] = _mm256_fmadd_ps(a[u], r[u], set_ps(c));
  }
  for (int u = 0; u < kHalfChains; ++u) {
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(k[u]), _mm256_set1_epi32(127));
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
    a[u] = _mm256_andnot_ps(underflow[u], _mm256_mul_ps(a[u], scale));
  }
}

// gelu_avx512.cpp's cdf_pdf_half, 8 lanes.
[[gnu::always_inline]] inline void cdf_pdf_half(const ChainsPs& x, ChainsPs& cdf, ChainsPs& pdf, bool with_pdf) {
  const __m256 one = set_ps(1.0f), sign = set_ps(-0.0f);
  __m256 t[kHalfChains], half_x[kHalfChains];
  ChainsPs& e = cdf;
  for (int u = 0; u < kHalfChains; ++u) {
    const __m256 d = _mm256_fmadd_ps(_mm256_andnot_ps(sign, x[u]), set_ps(static_cast<float>(kGeluSqrtHalf)), set_ps(2.0f));
    t[u] = _mm256_div_ps(one, d);
    half_x[u] = _mm256_mul_ps(set_ps(0.5f), x[u]);
    e[u] = set_ps(static_cast<float>(kGeluErfc[9] * 512));
  }
  for (int j = 8; j >= 0; --j) {
    const __m256 c = set_ps(static_cast<float>(kGeluErfc[j] * (1 << j)));
    for (int u = 0; u < kHalfChains; ++u) e[u] = _mm256_fmadd_ps(t[u], e[u], c);
  }
  for (int u = 0; u < kHalfChains; ++u) e[u] = _mm256_fnmadd_ps(half_x[u], x[u], e[u]);
  exp_nonpositive_ps(e);
  for (int u = 0; u < kHalfChains; ++u) {
    const __m256 h = _mm256_mul_ps(t[u], e[u]);
    const __m256 negative = _mm256_cmp_ps(x[u], _mm256_setzero_ps(), _CMP_LT_OQ);
    cdf[u] = _mm256_blendv_ps(_mm256_sub_ps(one, h), h, negative);
  }
  if (with_pdf) {
    for (int u = 0; u < kHalfChains; ++u) pdf[u] = _mm256_fnmadd_ps(half_x[u], x[u], _mm256_setzero_ps());
    exp_nonpositive_ps(pdf);
    for (int u = 0; u < kHalfChains; ++u) pdf[u] = _mm256_mul_ps(pdf[u], set_ps(static_cast<float>(kGeluInvSqrt2Pi)));
  }
}

void normal_cdf_pdf_half(const float* x, float* cdf, float* pdf, int64_t n) {
  for (int64_t i = 0; i < n; i += 8 * kHalfChains) {
    int64_t valid[kHalfChains];
    ChainsPs xv, c, p;
    for (int u = 0; u < kHalfChains; ++u) {
      valid[u] = n - i - 8 * u;
      xv[u] = valid[u] > 0 ? load_first(x + i + 8 * u, valid[u]) : _mm256_setzero_ps();
    }
    cdf_pdf_half(xv, c, p, pdf != nullptr);
    for (int u = 0; u < kHalfChains; ++u) {
      if (valid[u] <= 0) break;
      store_first(cdf + i + 8 * u, valid[u], c[u]);
      if (pdf) store_first(pdf + i + 8 * u, valid[u], p[u]);
    }
  }
}

// v rounded to the half type and widened back, as the convert entries would store and load it.
inline __m256 round_to(HalfType type, __m256 v) {
  if (type == HalfType::F16) return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return bf16_rounded(v);
}

// gelu_half without the roundings.
void gelu_values(const float* x, const float* g, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8 * kHalfChains) {
    int64_t valid[kHalfChains];
    ChainsPs xv, c, p;
    for (int u = 0; u < kHalfChains; ++u) {
      valid[u] = n - i - 8 * u;
      xv[u] = valid[u] > 0 ? load_first(x + i + 8 * u, valid[u]) : _mm256_setzero_ps();
    }
    cdf_pdf_half(xv, c, p, g != nullptr);
    for (int u = 0; u < kHalfChains; ++u) {
      if (valid[u] <= 0) break;
      const __m256 v = g ? _mm256_mul_ps(load_first(g + i + 8 * u, valid[u]), _mm256_fmadd_ps(xv[u], p[u], c[u]))
                         : _mm256_mul_ps(xv[u], c[u]);
      store_first(y + i + 8 * u, valid[u], v);
    }
  }
}

void round_values(HalfType type, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) store_first(y + i, n - i, round_to(type, load_first(x + i, n - i)));
}

// The roundings as passes of their own over blocks in L1, unlike gelu_avx512.cpp: inside the loop
// over four chains their constants outgrew AVX2's 16 registers, and cost about three times as much
// (AirNet's bf16 step at level avx2 2% slower than with separate rounding passes).
void gelu_half(const float* x, const float* g, float* y, int64_t n, HalfType type, bool round_x, bool round_y) {
  constexpr int64_t kBlock = 256;
  alignas(32) float rounded_x[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t len = std::min(kBlock, n - s);
    const float* xs = x + s;
    if (round_x) round_values(type, xs, rounded_x, len), xs = rounded_x;
    gelu_values(xs, g ? g + s : nullptr, y + s, len);
    if (round_y) round_values(type, y + s, y + s, len);
  }
}

}  // namespace

extern const Gelu kGeluAvx2 = {normal_cdf_pdf, normal_cdf_pdf_half, gelu_half};

}  // namespace demi::backend::cpu::isa

// The normal CDF and PDF behind GELU in plain C++ (double, std::exp): the oracle of the vector
// variants and the `scalar` level. Formula and reasons in isa.h (Gelu).
#include <algorithm>
#include <cmath>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

void normal_cdf_pdf(const float* x, float* cdf, float* pdf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double xd = x[i], z = std::fabs(xd) * kGeluSqrtHalf, t = 1.0 / (1.0 + 0.5 * z);
    double p = kGeluErfc[9];
    for (int j = 8; j >= 0; --j) p = kGeluErfc[j] + t * p;
    const double h = 0.5 * t * std::exp(p - z * z);  // erfc(|x| / sqrt 2) / 2 = Phi(-|x|)
    cdf[i] = static_cast<float>(xd < 0 ? h : 1.0 - h);
    if (pdf) pdf[i] = static_cast<float>(std::exp(-z * z) * kGeluInvSqrt2Pi);
  }
}

// v rounded to the half type and widened back, through the scalar conversions.
float rounded(HalfType type, float v) {
  uint16_t h;
  float back;
  (type == HalfType::F16 ? kConvertScalar.f32_to_f16 : kConvertScalar.f32_to_bf16)(&v, &h, 1);
  (type == HalfType::F16 ? kConvertScalar.f16_to_f32 : kConvertScalar.bf16_to_f32)(&h, &back, 1);
  return back;
}

// isa.h's definition of gelu_half, with normal_cdf_pdf (this level's normal_cdf_pdf_half).
void gelu_half(const float* x, const float* g, float* y, int64_t n, HalfType type, bool round_x, bool round_y) {
  constexpr int64_t kBlock = 64;
  float xr[kBlock], cdf[kBlock], pdf[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t len = std::min(kBlock, n - s);
    for (int64_t i = 0; i < len; ++i) xr[i] = round_x ? rounded(type, x[s + i]) : x[s + i];
    normal_cdf_pdf(xr, cdf, g ? pdf : nullptr, len);
    for (int64_t i = 0; i < len; ++i) {
      const float v = g ? g[s + i] * std::fma(xr[i], pdf[i], cdf[i]) : xr[i] * cdf[i];
      y[s + i] = round_y ? rounded(type, v) : v;
    }
  }
}

}  // namespace

extern const Gelu kGeluScalar = {normal_cdf_pdf, normal_cdf_pdf, gelu_half};

}  // namespace demi::backend::cpu::isa

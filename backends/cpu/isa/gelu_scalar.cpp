// The normal CDF and PDF behind GELU in plain C++ (double, std::exp): the oracle of the vector
// variants and the `scalar` level. Formula and reasons in isa.h (Gelu).
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

}  // namespace

extern const Gelu kGeluScalar = {normal_cdf_pdf, normal_cdf_pdf};

}  // namespace demi::backend::cpu::isa

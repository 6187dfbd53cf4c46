// GELU over blocks of fp32 values (gelu.h).
#include "backends/cpu/gelu.h"

namespace demi::backend::cpu {

void gelu_block(const float* x, const float* g, float* y, int64_t len, std::optional<HalfValues> half) {
  const isa::Gelu& k = isa::active().gelu;
  if (half) return k.gelu_half(x, g, y, len, half->type, half->round_x, half->round_y);
  alignas(64) float cdf[kGeluBlock], pdf[kGeluBlock];
  k.normal_cdf_pdf(x, cdf, g ? pdf : nullptr, len);
  if (g) {
    for (int64_t i = 0; i < len; ++i) y[i] = g[i] * (cdf[i] + x[i] * pdf[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) y[i] = x[i] * cdf[i];
  }
}

}  // namespace demi::backend::cpu

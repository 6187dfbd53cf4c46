// GELU over blocks of fp32 values (gelu.h).
#include "backends/cpu/gelu.h"

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu {

void gelu_block(const float* x, const float* g, float* y, int64_t len, bool half) {
  alignas(64) float cdf[kGeluBlock], pdf[kGeluBlock];
  const isa::Gelu& k = isa::active().gelu;
  (half ? k.normal_cdf_pdf_half : k.normal_cdf_pdf)(x, cdf, g ? pdf : nullptr, len);
  if (g) {
    for (int64_t i = 0; i < len; ++i) y[i] = g[i] * (cdf[i] + x[i] * pdf[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) y[i] = x[i] * cdf[i];
  }
}

}  // namespace demi::backend::cpu

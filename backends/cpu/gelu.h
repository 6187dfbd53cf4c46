// GELU over blocks of fp32 values: the one definition behind the elementwise GELU (elementwise.cpp)
// and batch norm's fused one (batch_norm.cpp), compiled once so that both give the same bits.
#pragma once

#include <cstdint>

namespace demi::backend::cpu {

constexpr int64_t kGeluBlock = 256;

// y = gelu(x) = x Phi(x) or, with g given, y = g * gelu'(x) = g * (Phi(x) + x phi(x)), over
// len <= kGeluBlock values; y may be x or g. The normal CDF and PDF come from the ISA level's
// vectorised kernel (isa::Gelu: erfc in double, relative error < 1.2e-7), or with `half` (a result
// rounded to a half type next) its fp32 variant.
void gelu_block(const float* x, const float* g, float* y, int64_t len, bool half);

}  // namespace demi::backend::cpu

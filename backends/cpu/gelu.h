// GELU over blocks of fp32 values: the one definition behind the elementwise GELU (elementwise.cpp)
// and batch norm's fused one (batch_norm.cpp), compiled once so that both give the same bits.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu {

constexpr int64_t kGeluBlock = 256;

// Values that a half type stores, for gelu_block: the type, whether x still has to be rounded to it
// (batch norm's y, computed in fp32) and whether y has to come back rounded (when it is read again
// in fp32; a result stored through a conversion is rounded there anyway).
struct HalfValues {
  isa::HalfType type;
  bool round_x, round_y;
};

// y = gelu(x) = x Phi(x) or, with g given, y = g * gelu'(x) = g * (Phi(x) + x phi(x)), over
// len <= kGeluBlock values; y may be x or g. For fp32 values (`half` empty) the normal CDF and PDF
// come from the ISA level's double kernel (isa::Gelu: relative error < 1.2e-7); for half values,
// the fp32 kernel with the roundings `half` asks for (isa::Gelu::gelu_half). Either way what a
// separate op reading and storing that type computes.
void gelu_block(const float* x, const float* g, float* y, int64_t len, std::optional<HalfValues> half);

// HalfValues for the type T stores as; empty for float.
template <typename T>
constexpr std::optional<HalfValues> half_values(bool round_x, bool round_y) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>);
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return HalfValues{isa::HalfType::Bf16, round_x, round_y};
  if constexpr (std::is_same_v<T, Eigen::half>) return HalfValues{isa::HalfType::F16, round_x, round_y};
  return std::nullopt;
}

}  // namespace demi::backend::cpu

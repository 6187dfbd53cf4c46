// Plain C++ half <-> fp32 conversions, bit for bit IEEE round-to-nearest-even: the oracle of the
// vector conversions, their tails, and the `scalar` level.
#include <cstring>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // inf, or NaN quieted with its payload kept, as F16C's vcvtph2ps does
    return float_of(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  }
  if (exponent != 0) return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal or zero: exact
  return float_of(sign | bits_of(magnitude));
}

uint16_t float_to_half(float f) {
  uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u | ((x >> 13) & 0x3ffu);  // NaN, quieted
  if (x >= 0x477ff000u) return sign | 0x7c00u;                          // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                                // below 2^-14: subnormal
    if (x <= 0x33000000u) return sign;                                  // <= 2^-25 rounds to 0
    const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(x >> 23);                  // 14 .. 24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t h = (x - 0x38000000u) >> 13;  // rebias 127 -> 15; a carry into the exponent is right
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

uint16_t float_to_bfloat(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x | 0x400000u) >> 16);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_of(uint32_t{src[i]} << 16);
}
void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bfloat(src[i]);
}

}  // namespace

extern const Convert kConvertScalar = {f16_to_f32, bf16_to_f32, f32_to_f16, f32_to_bf16};

}  // namespace demi::backend::cpu::isa

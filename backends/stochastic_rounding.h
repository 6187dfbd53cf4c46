// Stochastic rounding of an fp32 value into fp16 or bf16, shared by the CPU backend and the CUDA
// kernels (__host__ __device__, integer bit arithmetic only, so both sides give the same bits).
// x rounds to the representable value above it with probability (x - down) / (up - down), else to
// the one below: unbiased, so updates far below half an ulp still move a weight on average, which
// round-to-nearest loses (llm.c writes its bf16 weights this way). Exact values stay exact; NaN,
// inf and values beyond the format's largest finite one round to nearest. Internal to backends/.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/philox.h"

namespace demi::backend::rounding {

enum class HalfFormat { F16, BF16 };

DEMI_HOST_DEVICE inline uint32_t float_bits(float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  return b;
}
DEMI_HOST_DEVICE inline float bits_float(uint32_t b) {
  float v;
  memcpy(&v, &b, 4);
  return v;
}

// The value of half bits h (fp16 or bf16) as a float, exactly.
DEMI_HOST_DEVICE inline float half_to_float(uint16_t h, HalfFormat f) {
  if (f == HalfFormat::BF16) return bits_float(static_cast<uint32_t>(h) << 16);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // subnormal: m * 2^-24
  return sign ? -magnitude : magnitude;
}

// x rounded to the nearest half value, ties to even (IEEE's default, and Eigen's and CUDA's _rn).
DEMI_HOST_DEVICE inline uint16_t float_to_half_nearest(float x, HalfFormat f) {
  const uint32_t b = float_bits(x);
  if (f == HalfFormat::BF16) {
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
  }
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal (or 0), m * 2^-24 with m rounded to nearest even
    const float scaled = bits_float(a) * 16777216.0f;  // exact: a power-of-two scale
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);  // m == 0x400 is the smallest normal, as it should be
  }
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);  // 13 bits dropped, ties to even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

// x rounded up (away from the value below) with probability (x - down) / (up - down), from a
// uniform `u` in [0, 1).
DEMI_HOST_DEVICE inline uint16_t float_to_half_stochastic(float x, HalfFormat f, float u) {
  const uint16_t nearest = float_to_half_nearest(x, f);
  const float nearest_value = half_to_float(nearest, f);
  const uint16_t magnitude = nearest & 0x7FFFu, sign = nearest & 0x8000u;
  const uint16_t exponent_mask = f == HalfFormat::BF16 ? 0x7F80u : 0x7C00u;
  // exact, NaN or inf (or past the largest finite value): nothing to choose
  if (nearest_value == x || (magnitude & exponent_mask) == exponent_mask || x != x) return nearest;
  const float ax = x < 0 ? -x : x, an = nearest_value < 0 ? -nearest_value : nearest_value;
  // the two magnitudes around |x|: nearest and its neighbour on the other side of |x|
  const uint16_t below = an > ax ? static_cast<uint16_t>(magnitude - 1u) : magnitude;
  const uint16_t above = an > ax ? magnitude : static_cast<uint16_t>(magnitude + 1u);
  if ((above & exponent_mask) == exponent_mask) return nearest;  // past the largest finite value
  const float low = half_to_float(below, f), high = half_to_float(above, f);
  const float p_up = (ax - low) / (high - low);
  return static_cast<uint16_t>(sign | (u < p_up ? above : below));
}

// The uniform draw of element i: Philox-4x32-10 at counter (offset + i) under key seed, 24 bits.
DEMI_HOST_DEVICE inline float rounding_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  const philox::Words w = philox::philox4x32_10(offset + static_cast<uint64_t>(i), seed);
  return static_cast<float>(w.x0 >> 8) * 5.9604644775390625e-8f;  // [0, 1) in steps of 2^-24
}

}  // namespace demi::backend::rounding

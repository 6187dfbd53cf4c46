// isa::BatchNormHalf's loops (isa.h), in plain C++ that each variant file compiles with its own
// flags and the compiler vectorises, for a half type given as a codec: batch_norm_half_<isa>.cpp
// include this header and export a bf16 and an fp16 table. Everything here has internal linkage,
// so no AVX-512 copy of it can stand in for baseline code. Values go kLanes at a time: bf16's
// widening (a shift) and rounding inline, where the compiler vectorises them; fp16's through the
// codec's widen_block / narrow_block (F16C's conversions, or the scalar ones for the oracle). Sums
// run in kLanes independent lanes added pairwise at the end: the same order whether a lane is a
// vector element or a scalar, so every level gives the same bits.
#pragma once

#include <cstring>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int kLanes = 32;

// bf16 by bits: widening is a shift; narrowing rounds to nearest even with NaN kept quiet
// (convert_scalar.cpp's float_to_bfloat as a select).
struct Bf16Codec {
  static constexpr bool kInline = true;  // widen and narrow vectorise where they are used
  static float widen(uint16_t b) {
    const uint32_t u = uint32_t{b} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t narrow(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u | 0x400000u) >> 16;
    return static_cast<uint16_t>(f != f ? quiet : nearest);
  }
};

// fp16 through the scalar conversions (convert_scalar.cpp): the oracle's codec.
struct ScalarF16Codec {
  static constexpr bool kInline = false;  // a block at a time through the conversions
  static float widen(uint16_t h) {
    float f;
    kConvertScalar.f16_to_f32(&h, &f, 1);
    return f;
  }
  static uint16_t narrow(float f) {
    uint16_t h;
    kConvertScalar.f32_to_f16(&f, &h, 1);
    return h;
  }
  static void widen_block(const uint16_t* x, float (&v)[kLanes]) { kConvertScalar.f16_to_f32(x, v, kLanes); }
  static void narrow_block(const float (&v)[kLanes], uint16_t* y) { kConvertScalar.f32_to_f16(v, y, kLanes); }
};

// The kLanes values at x widened into v: element by element where the codec's widening vectorises
// in place (bf16's shift: the loops then compile as if written for bf16 alone), else by its block.
template <typename Codec>
inline void widen_lanes(const uint16_t* x, float (&v)[kLanes]) {
  if constexpr (Codec::kInline) {
    for (int j = 0; j < kLanes; ++j) v[j] = Codec::widen(x[j]);
  } else {
    Codec::widen_block(x, v);
  }
}
template <typename Codec>
inline void narrow_lanes(const float (&v)[kLanes], uint16_t* y) {
  if constexpr (Codec::kInline) {
    for (int j = 0; j < kLanes; ++j) y[j] = Codec::narrow(v[j]);
  } else {
    Codec::narrow_block(v, y);
  }
}

inline float normalized(float x, const BnNorm& k) { return ((x - k.hi) - k.lo) * k.scale + k.shift; }

template <typename Acc>
Acc add_lanes(Acc (&lane)[kLanes]) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  return lane[0];
}

// Asks for plane p + 1 of x (when there is one) while plane p is read: a channel's next plane is
// a whole image further on, where the hardware prefetcher has not looked.
inline void prefetch_next(const uint16_t* x, int64_t p, int64_t planes, int64_t hw, int64_t stride) {
  if (p + 1 >= planes) return;
  const char* next = reinterpret_cast<const char*>(x + (p + 1) * stride);
  for (int64_t b = 0; b < hw * 2; b += 64) __builtin_prefetch(next + b, 0);
}

template <typename Codec>
double bn_sum(const BnPlanes& x) {
  double lane[kLanes] = {}, rest = 0;
  for (int64_t p = 0; p < x.planes; ++p) {
    const uint16_t* v = x.data + p * x.stride;
    prefetch_next(x.data, p, x.planes, x.hw, x.stride);
    int64_t i = 0;
    for (; i + kLanes <= x.hw; i += kLanes) {
      float f[kLanes];
      widen_lanes<Codec>(v + i, f);
      for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(f[j]);
    }
    for (; i < x.hw; ++i) rest += static_cast<double>(Codec::widen(v[i]));
  }
  return add_lanes(lane) + rest;
}

// Adds fp32 lanes into double lanes and clears them: fp32 sums of at most a plane's values.
inline void flush(float (&lane)[kLanes], double (&total)[kLanes]) {
  for (int j = 0; j < kLanes; ++j) total[j] += static_cast<double>(lane[j]), lane[j] = 0.0f;
}

template <typename Codec>
double bn_sum_squared_deviations(const BnPlanes& x, float hi, float lo) {
  float lane[kLanes] = {};
  double total[kLanes] = {}, rest = 0;
  for (int64_t p = 0; p < x.planes; ++p) {
    const uint16_t* v = x.data + p * x.stride;
    int64_t i = 0;
    for (; i + kLanes <= x.hw; i += kLanes) {
      float f[kLanes];
      widen_lanes<Codec>(v + i, f);
      for (int j = 0; j < kLanes; ++j) {
        const float d = (f[j] - hi) - lo;
        lane[j] += d * d;
      }
    }
    flush(lane, total);
    float tail = 0.0f;
    for (; i < x.hw; ++i) {
      const float d = (Codec::widen(v[i]) - hi) - lo;
      tail += d * d;
    }
    rest += static_cast<double>(tail);
  }
  return add_lanes(total) + rest;
}

// y < -relu_band stored as +0 (relu_band >= 0), else y: a separate ReLU of the stored value.
inline float relu_of(float y, float relu_band) { return y < -relu_band ? 0.0f : y; }

template <typename Codec>
void bn_normalize(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const BnNorm c = k;  // by value: y's stores cannot change it
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float f[kLanes];
    widen_lanes<Codec>(x + i, f);
    for (int j = 0; j < kLanes; ++j) f[j] = normalized(f[j], c);
    if (relu) {
      for (int j = 0; j < kLanes; ++j) f[j] = relu_of(f[j], relu_band);
    }
    narrow_lanes<Codec>(f, y + i);
  }
  for (; i < n; ++i) {
    const float v = normalized(Codec::widen(x[i]), c);
    y[i] = Codec::narrow(relu ? relu_of(v, relu_band) : v);
  }
}

// g where the mask lets it through, else 0 (Side: BnReluMask::side).
template <int Side>
float masked(float g, float x, const BnReluMask& m) {
  if constexpr (Side == 1) {
    return x > m.t ? g : 0.0f;
  } else if constexpr (Side == -1) {
    return x < m.t ? g : 0.0f;
  } else if constexpr (Side == 0) {
    return normalized(x, m.k) > m.band ? g : 0.0f;
  } else {
    return g;
  }
}

template <typename Codec, int Side>
void gradient_sums_masked(const BnPlanes& x, const uint16_t* g, int64_t g_stride, float mean, const BnReluMask& mask,
                          double* sum_g, double* sum_gd) {
  const BnReluMask m = mask;
  double lane_g[kLanes] = {}, total_gd[kLanes] = {}, rest_g = 0, rest_gd = 0;
  float lane_gd[kLanes] = {};
  for (int64_t p = 0; p < x.planes; ++p) {
    const uint16_t* xv = x.data + p * x.stride;
    const uint16_t* gv = g + p * g_stride;
    prefetch_next(x.data, p, x.planes, x.hw, x.stride);
    prefetch_next(g, p, x.planes, x.hw, g_stride);
    int64_t i = 0;
    for (; i + kLanes <= x.hw; i += kLanes) {
      float xf[kLanes], gm[kLanes];
      widen_lanes<Codec>(xv + i, xf);
      widen_lanes<Codec>(gv + i, gm);
      for (int j = 0; j < kLanes; ++j) {  // one loop per accumulator type: GCC leaves a loop of both scalar
        gm[j] = masked<Side>(gm[j], xf[j], m);
        lane_gd[j] += gm[j] * (xf[j] - mean);
      }
      for (int j = 0; j < kLanes; ++j) lane_g[j] += static_cast<double>(gm[j]);
    }
    flush(lane_gd, total_gd);
    float tail_gd = 0.0f;
    for (; i < x.hw; ++i) {
      const float xf = Codec::widen(xv[i]), gf = masked<Side>(Codec::widen(gv[i]), xf, m);
      rest_g += static_cast<double>(gf);
      tail_gd += gf * (xf - mean);
    }
    rest_gd += static_cast<double>(tail_gd);
  }
  *sum_g = add_lanes(lane_g) + rest_g;
  *sum_gd = add_lanes(total_gd) + rest_gd;
}

template <typename Codec>
void bn_gradient_sums(const BnPlanes& x, const uint16_t* g, int64_t g_stride, float mean, const BnReluMask& mask,
                      double* sum_g, double* sum_gd) {
  switch (mask.side) {
    case 1: return gradient_sums_masked<Codec, 1>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    case -1: return gradient_sums_masked<Codec, -1>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    case 0: return gradient_sums_masked<Codec, 0>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    default: return gradient_sums_masked<Codec, BnReluMask::kNone>(x, g, g_stride, mean, mask, sum_g, sum_gd);
  }
}

template <typename Codec, int Side>
void grad_input_masked(const uint16_t* x, const uint16_t* g, uint16_t* gx, int64_t n, float mean,
                       const BnReluMask& mask, float k_g, float k_d, float k_0) {
  const BnReluMask m = mask;
  auto grad = [&](float xv, float gv) { return (masked<Side>(gv, xv, m) * k_g + (xv - mean) * k_d) + k_0; };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float xf[kLanes], gf[kLanes];
    widen_lanes<Codec>(x + i, xf);
    widen_lanes<Codec>(g + i, gf);
    for (int j = 0; j < kLanes; ++j) gf[j] = grad(xf[j], gf[j]);
    narrow_lanes<Codec>(gf, gx + i);
  }
  for (; i < n; ++i) gx[i] = Codec::narrow(grad(Codec::widen(x[i]), Codec::widen(g[i])));
}

template <typename Codec>
void bn_grad_input(const uint16_t* x, const uint16_t* g, uint16_t* gx, int64_t n, float mean, const BnReluMask& mask,
                   float k_g, float k_d, float k_0) {
  switch (mask.side) {
    case 1: return grad_input_masked<Codec, 1>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    case -1: return grad_input_masked<Codec, -1>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    case 0: return grad_input_masked<Codec, 0>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    default: return grad_input_masked<Codec, BnReluMask::kNone>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
  }
}

// The table of this header's loops for a codec, with the variant file's own `normalize`.
template <typename Codec>
constexpr BatchNormHalf batch_norm_half_table(decltype(BatchNormHalf::normalize) normalize) {
  return {bn_sum<Codec>, bn_sum_squared_deviations<Codec>, normalize, bn_gradient_sums<Codec>, bn_grad_input<Codec>};
}

}  // namespace
}  // namespace demi::backend::cpu::isa

// isa::BatchNormBf16's loops (isa.h), in plain C++ that each variant file compiles with its own
// flags and the compiler vectorises: batch_norm_bf16_<isa>.cpp include this header and export the
// table. Everything here has internal linkage, so no AVX-512 copy of it can stand in for baseline
// code. Sums run in kLanes independent lanes added pairwise at the end: the same order whether a
// lane is a vector element or a scalar, so every level gives the same bits.
#pragma once

#include <cstring>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int kLanes = 32;

inline float widen(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept as a quiet NaN: convert_scalar.cpp's float_to_bfloat as a select.
inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u | 0x400000u) >> 16;
  return static_cast<uint16_t>(f != f ? quiet : nearest);
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

double bn_sum(const BnPlanes& x) {
  double lane[kLanes] = {}, rest = 0;
  for (int64_t p = 0; p < x.planes; ++p) {
    const uint16_t* v = x.data + p * x.stride;
    prefetch_next(x.data, p, x.planes, x.hw, x.stride);
    int64_t i = 0;
    for (; i + kLanes <= x.hw; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(widen(v[i + j]));
    }
    for (; i < x.hw; ++i) rest += static_cast<double>(widen(v[i]));
  }
  return add_lanes(lane) + rest;
}

// Adds fp32 lanes into double lanes and clears them: fp32 sums of at most a plane's values.
inline void flush(float (&lane)[kLanes], double (&total)[kLanes]) {
  for (int j = 0; j < kLanes; ++j) total[j] += static_cast<double>(lane[j]), lane[j] = 0.0f;
}

double bn_sum_squared_deviations(const BnPlanes& x, float hi, float lo) {
  float lane[kLanes] = {};
  double total[kLanes] = {}, rest = 0;
  for (int64_t p = 0; p < x.planes; ++p) {
    const uint16_t* v = x.data + p * x.stride;
    int64_t i = 0;
    for (; i + kLanes <= x.hw; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const float d = (widen(v[i + j]) - hi) - lo;
        lane[j] += d * d;
      }
    }
    flush(lane, total);
    float tail = 0.0f;
    for (; i < x.hw; ++i) {
      const float d = (widen(v[i]) - hi) - lo;
      tail += d * d;
    }
    rest += static_cast<double>(tail);
  }
  return add_lanes(total) + rest;
}

void bn_normalize(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const BnNorm c = k;  // by value: y's stores cannot change it
  if (relu_band < 0) {
    for (int64_t i = 0; i < n; ++i) y[i] = round_bf16(normalized(widen(x[i]), c));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = normalized(widen(x[i]), c);
    y[i] = round_bf16(v < -relu_band ? 0.0f : v);
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

template <int Side>
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
      float gm[kLanes];  // one loop per accumulator type: GCC leaves a loop of both scalar
      for (int j = 0; j < kLanes; ++j) {
        const float xf = widen(xv[i + j]);
        gm[j] = masked<Side>(widen(gv[i + j]), xf, m);
        lane_gd[j] += gm[j] * (xf - mean);
      }
      for (int j = 0; j < kLanes; ++j) lane_g[j] += static_cast<double>(gm[j]);
    }
    flush(lane_gd, total_gd);
    float tail_gd = 0.0f;
    for (; i < x.hw; ++i) {
      const float xf = widen(xv[i]), gf = masked<Side>(widen(gv[i]), xf, m);
      rest_g += static_cast<double>(gf);
      tail_gd += gf * (xf - mean);
    }
    rest_gd += static_cast<double>(tail_gd);
  }
  *sum_g = add_lanes(lane_g) + rest_g;
  *sum_gd = add_lanes(total_gd) + rest_gd;
}

void bn_gradient_sums(const BnPlanes& x, const uint16_t* g, int64_t g_stride, float mean, const BnReluMask& mask,
                      double* sum_g, double* sum_gd) {
  switch (mask.side) {
    case 1: return gradient_sums_masked<1>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    case -1: return gradient_sums_masked<-1>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    case 0: return gradient_sums_masked<0>(x, g, g_stride, mean, mask, sum_g, sum_gd);
    default: return gradient_sums_masked<BnReluMask::kNone>(x, g, g_stride, mean, mask, sum_g, sum_gd);
  }
}

template <int Side>
void grad_input_masked(const uint16_t* x, const uint16_t* g, uint16_t* gx, int64_t n, float mean,
                       const BnReluMask& mask, float k_g, float k_d, float k_0) {
  const BnReluMask m = mask;
  for (int64_t i = 0; i < n; ++i) {
    const float xv = widen(x[i]), gv = masked<Side>(widen(g[i]), xv, m);
    gx[i] = round_bf16((gv * k_g + (xv - mean) * k_d) + k_0);
  }
}

void bn_grad_input(const uint16_t* x, const uint16_t* g, uint16_t* gx, int64_t n, float mean, const BnReluMask& mask,
                   float k_g, float k_d, float k_0) {
  switch (mask.side) {
    case 1: return grad_input_masked<1>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    case -1: return grad_input_masked<-1>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    case 0: return grad_input_masked<0>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
    default: return grad_input_masked<BnReluMask::kNone>(x, g, gx, n, mean, mask, k_g, k_d, k_0);
  }
}

}  // namespace
}  // namespace demi::backend::cpu::isa

// The table for the variant file that includes this header.
#define DEMI_BATCH_NORM_BF16_TABLE \
  {bn_sum, bn_sum_squared_deviations, bn_normalize, bn_gradient_sums, bn_grad_input}

// Philox-4x32-10 and the uniform / normal transforms built on it, shared by the CPU backend and the
// CUDA kernels as __host__ __device__ inline functions: both sides run this very code, so a draw is
// a function of (seed, counter) alone, whatever the device. Internal to backends/.
//
// Exact mapping, for output element i (0-based, row-major) of RandomArgs:
//   key     = (k0, k1) = (seed & 0xffffffff, seed >> 32)
//   counter = (c0, c1, c2, c3) = (lo32(offset + i), hi32(offset + i), 0, 0)   (64-bit wrap-around add)
//   (x0, x1, x2, x3) = Philox4x32-10(counter, key)   (Random123's: M0 = 0xD2511F53,
//                       M1 = 0xCD9E8D57, W0 = 0x9E3779B9, W1 = 0xBB67AE85; key bumped between rounds)
//   uniform bits:  u24(w) = (w >> 8) * 2^-24 in [0, 1);
//                  u53(hi, lo) = ((hi << 21) ^ (lo >> 11)) * 2^-53 in [0, 1) (64-bit hi)
//   Uniform [a, b):  u = u53(x0, x1) for F64, u24(x0) otherwise;  v = fma(b - a, u, a) in double,
//                    rounded once to the output dtype; a result that rounds up to b (or past it,
//                    to inf) steps down one ulp, so the interval stays half-open in every dtype.
//   Normal (a, b):   u1 = 1 - u, u2 = second uniform, with (u, u2) = (u53(x0, x1), u53(x2, x3)) for
//                    F64 and (u24(x0), u24(x1)) otherwise (u1 in (0, 1], so log is finite);
//                    z = sqrt(-2 ln u1) * cos(2 pi u2) in double; v = fma(b, z, a) rounded once.
// One counter per element (the sine half of Box-Muller and x2, x3 are unused outside F64), so the
// caller advances offset by numel between calls and every element stays independent.
//
// fma, not a + (b - a) * u: whether a compiler contracts the latter depends on its flags and the
// target (GCC with -march=native does, nvcc does by default), so only the fma is the same bits
// everywhere. log and cos are each platform's libm (glibc, CUDA's libdevice): a normal may differ by
// an ulp or two of double between devices, which rounding to fp32 or a half type almost always hides.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define DEMI_HOST_DEVICE __host__ __device__
#else
#define DEMI_HOST_DEVICE
#endif

namespace demi::backend::philox {

inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key increments (Weyl sequence)
inline constexpr int kRounds = 10;
inline constexpr double kTwoPi = 6.283185307179586476925;

// The four output words of one counter.
struct Words {
  uint32_t x0, x1, x2, x3;
};

DEMI_HOST_DEVICE inline uint32_t key_lo(uint64_t seed) { return static_cast<uint32_t>(seed); }
DEMI_HOST_DEVICE inline uint32_t key_hi(uint64_t seed) { return static_cast<uint32_t>(seed >> 32); }

// One Philox round on one counter under the round key (k0, k1).
DEMI_HOST_DEVICE inline void philox_round(uint32_t& x0, uint32_t& x1, uint32_t& x2, uint32_t& x3, uint32_t k0,
                                          uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * x0;
  const uint64_t p1 = static_cast<uint64_t>(kM1) * x2;
  const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ k0;
  const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ k1;
  x0 = n0;
  x1 = static_cast<uint32_t>(p1);
  x2 = n2;
  x3 = static_cast<uint32_t>(p0);
}

// Philox4x32-10 of counter (lo32(counter), hi32(counter), 0, 0) under key seed.
DEMI_HOST_DEVICE inline Words philox4x32_10(uint64_t counter, uint64_t seed) {
  Words w{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u};
  uint32_t k0 = key_lo(seed), k1 = key_hi(seed);
  for (int r = 0; r < kRounds; ++r) {
    philox_round(w.x0, w.x1, w.x2, w.x3, k0, k1);
    k0 += kW0;
    k1 += kW1;
  }
  return w;
}

DEMI_HOST_DEVICE inline double u24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1p-24; }
DEMI_HOST_DEVICE inline double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1p-53;
}

// Uniform on [a, b) in double, before the one rounding into the output dtype (wide: F64 output).
DEMI_HOST_DEVICE inline double uniform(uint32_t x0, uint32_t x1, bool wide, double a, double b) {
  const double u = wide ? u53(x0, x1) : u24(x0);
  return ::fma(b - a, u, a);
}

// Normal with mean a and standard deviation b in double, before the one rounding (Box-Muller, cosine).
DEMI_HOST_DEVICE inline double normal(uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3, bool wide, double a,
                                      double b) {
  const double u1 = 1.0 - (wide ? u53(x0, x1) : u24(x0));
  const double u2 = wide ? u53(x2, x3) : u24(x1);
  const double z = ::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2);
  return ::fma(b, z, a);
}

// The bits of the next float below the float with bits `bits` (Bits: uint16_t for fp16 and bf16,
// uint32_t, uint64_t), i.e. nextafter(v, -inf) for a non-NaN v: for the rare uniform draw that rounds
// up to b (or, for a huge b, to inf).
template <typename Bits>
DEMI_HOST_DEVICE inline Bits bits_below(Bits bits) {
  constexpr Bits kSign = static_cast<Bits>(Bits{1} << (8 * sizeof(Bits) - 1));
  if ((bits & static_cast<Bits>(~kSign)) == 0) return static_cast<Bits>(kSign | 1u);  // +-0 -> -denorm_min
  if (bits & kSign) return static_cast<Bits>(bits + 1u);  // negative: one step away from zero
  return static_cast<Bits>(bits - 1u);                    // positive: one step toward zero
}

}  // namespace demi::backend::philox

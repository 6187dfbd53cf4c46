// Counter-based random numbers: Philox-4x32-10, uniform and normal (Box-Muller). Element i depends
// only on (seed, offset, i), never on the thread count; a CUDA kernel reproduces it as follows.
//
// Exact mapping, for output element i (0-based, row-major):
//   key     = (k0, k1) = (seed & 0xffffffff, seed >> 32)
//   counter = (c0, c1, c2, c3) = (lo32(offset + i), hi32(offset + i), 0, 0)   (64-bit wrap-around add)
//   (x0, x1, x2, x3) = Philox4x32-10(counter, key)   (Random123's: M0 = 0xD2511F53,
//                       M1 = 0xCD9E8D57, W0 = 0x9E3779B9, W1 = 0xBB67AE85; key bumped between rounds)
//   uniform bits:  u24(w) = (w >> 8) * 2^-24 in [0, 1);
//                  u53(hi, lo) = ((hi << 21) ^ (lo >> 11)) * 2^-53 in [0, 1) (64-bit hi)
//   Uniform [a, b):  u = u53(x0, x1) for F64, u24(x0) otherwise;  v = a + (b - a) * u in double,
//                    rounded once to the output dtype; a result that rounds up to b (or past it,
//                    to inf) steps down one ulp, so the interval stays half-open in every dtype.
//   Normal (a, b):   u1 = 1 - u, u2 = second uniform, with (u, u2) = (u53(x0, x1), u53(x2, x3)) for
//                    F64 and (u24(x0), u24(x1)) otherwise (u1 in (0, 1], so log is finite);
//                    z = sqrt(-2 ln u1) * cos(2 pi u2) in double; v = a + b * z rounded once.
// One counter per element (the sine half of Box-Muller and x2, x3 are unused outside F64), so the
// caller advances offset by numel between calls and every element stays independent.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"

namespace demi::backend::cpu {
namespace {

constexpr double kTwoPi = 6.283185307179586476925;

// Philox4x32-10 for kLanes consecutive counters at once: round by round over the lanes, so the
// compiler vectorises the 32x32->64 multiplies (one counter at a time leaves them scalar).
constexpr int kLanes = 64;
struct PhiloxBlock {
  uint32_t x0[kLanes], x1[kLanes], x2[kLanes], x3[kLanes];
};

inline void philox4x32_10(uint64_t first_counter, uint64_t seed, PhiloxBlock& r) {
  for (int j = 0; j < kLanes; ++j) {
    const uint64_t c = first_counter + static_cast<uint64_t>(j);
    r.x0[j] = static_cast<uint32_t>(c);
    r.x1[j] = static_cast<uint32_t>(c >> 32);
    r.x2[j] = 0;
    r.x3[j] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kLanes; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * r.x0[j];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * r.x2[j];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ r.x1[j] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ r.x3[j] ^ k1;
      r.x0[j] = n0;
      r.x1[j] = static_cast<uint32_t>(p1);
      r.x2[j] = n2;
      r.x3[j] = static_cast<uint32_t>(p0);
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

inline double u24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1p-24; }
inline double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1p-53;
}

// The next T below v, for the rare uniform draw that rounds up to b (or, for a huge b, to inf).
template <typename T>
T below(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {
    uint16_t bits = Eigen::numext::bit_cast<uint16_t>(v);
    if ((bits & 0x7fffu) == 0) bits = 0x8001u;  // +-0 -> the smallest negative subnormal
    else if (bits & 0x8000u) ++bits;           // negative: one step away from zero
    else --bits;                                // positive: one step toward zero
    return Eigen::numext::bit_cast<T>(bits);
  }
}

template <typename T>
void random_typed(const RandomArgs& args) {
  T* out = args.output.as<T>();
  const int64_t n = args.output.numel();
  const double a = args.a, b = args.b;
  const uint64_t seed = args.seed, offset = args.offset;
  constexpr bool kWide = std::is_same_v<T, double>;
  const bool uniform = args.kind == RandomKind::Uniform;
  const bool empty = !(a < b);  // uniform with a == b: every draw is a
  parallel_for(n, uniform ? 20 : 40, [&](int64_t begin, int64_t end) {
    PhiloxBlock r;
    for (int64_t s = begin; s < end; s += kLanes) {
      philox4x32_10(offset + static_cast<uint64_t>(s), seed, r);
      const int len = static_cast<int>(std::min<int64_t>(kLanes, end - s));
      T* o = out + s;
      if (uniform) {
        for (int j = 0; j < len; ++j) {
          const double u = kWide ? u53(r.x0[j], r.x1[j]) : u24(r.x0[j]);
          T v = round_to<T>(a + (b - a) * u);
          if (!empty && static_cast<double>(static_cast<acc_t<T>>(v)) >= b) v = below(v);
          o[j] = v;
        }
      } else {
        for (int j = 0; j < len; ++j) {
          const double u1 = 1.0 - (kWide ? u53(r.x0[j], r.x1[j]) : u24(r.x0[j]));
          const double u2 = kWide ? u53(r.x2[j], r.x3[j]) : u24(r.x1[j]);
          const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
          o[j] = round_to<T>(a + b * z);
        }
      }
    }
  });
}

}  // namespace

void CpuKernels::random(const RandomArgs& args) {
  const bool uniform = args.kind == RandomKind::Uniform;
  DEMI_CHECK(std::isfinite(args.a) && std::isfinite(args.b), "random: a = ", args.a, " and b = ", args.b,
             " must be finite");
  DEMI_CHECK(!uniform || args.a <= args.b, "random uniform: needs a <= b for [a, b), got a = ", args.a,
             ", b = ", args.b);
  DEMI_CHECK(uniform || args.b >= 0.0, "random normal: the standard deviation b must be >= 0, got ", args.b);
  dispatch_floating(args.output.dtype, "random", [&](auto tag) { random_typed<decltype(tag)>(args); });
}

}  // namespace demi::backend::cpu

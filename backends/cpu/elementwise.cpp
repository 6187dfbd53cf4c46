// Element-wise kernels: fill, cast, unary and broadcasting binary ops. Half types are computed in
// fp32 and rounded once on store. Binary broadcasting is resolved against y's shape, which may be
// larger than broadcast(a, b) (expanding a gradient), and y may alias a full-shape operand.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/gelu.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;
template <typename T>
constexpr bool kIsFloating = std::is_floating_point_v<T> || kIsHalf<T>;

constexpr double kSqrtHalf = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)

template <typename T>
double to_double(T v) {
  return static_cast<double>(static_cast<acc_t<T>>(v));
}

// Whether v truncates (toward zero, as C++ and PyTorch do) to a value integer type I holds; false
// for NaN and inf, whose conversion is undefined behaviour in C++.
template <typename I>
bool fits_integer(double v) {
  if constexpr (std::is_same_v<I, uint8_t>) return v > -1.0 && v < 256.0;
  else return v >= -0x1p63 && v < 0x1p63;
}

// Any dtype -> floating Y with one rounding: int64 and double go straight to the target, the
// 2-byte types and float through fp32, which holds them exactly.
template <typename Y, typename X>
Y to_floating(X x) {
  if constexpr (std::is_same_v<X, double> || std::is_integral_v<X>) {
    if constexpr (std::is_same_v<Y, float>) return static_cast<float>(x);
    else return round_to<Y>(static_cast<double>(x));
  } else {
    const float f = static_cast<float>(x);
    if constexpr (std::is_same_v<Y, double>) return static_cast<double>(f);
    else return Y(f);
  }
}

template <typename X, typename Y>
void cast_typed(const TensorRef& x, const TensorRef& y) {
  const X* in = x.as<X>();
  Y* out = y.as<Y>();
  const int64_t n = x.numel();
  constexpr bool kFloatHalf = (std::is_same_v<X, float> && kIsHalf<Y>) || (kIsHalf<X> && std::is_same_v<Y, float>);
  if constexpr (kFloatHalf) {  // Eigen's vectorised conversions (F16C), same rounding as to_floating
    parallel_for(n, 1, [&](int64_t b, int64_t e) { convert_n(in + b, out + b, e - b); });
  } else if constexpr (kIsFloating<Y>) {
    parallel_for(n, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = to_floating<Y>(in[i]);
    });
  } else {
    // Exceptions cannot leave an OpenMP region: record the first bad index and throw after.
    std::atomic<int64_t> first_bad{n};
    parallel_for(n, 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double v = to_double(in[i]);
        if (!fits_integer<Y>(v)) {
          int64_t seen = first_bad.load();
          while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {}
          return;
        }
        out[i] = static_cast<Y>(v);
      }
    });
    const int64_t bad = first_bad.load();
    DEMI_CHECK(bad == n, "cast: element ", bad, " of ", x.dtype, " tensor ", x.shape, " is ",
               to_double(in[bad]), ", which does not fit in ", y.dtype,
               std::is_same_v<Y, uint8_t> ? " (range [0, 255])" : " (range [-2^63, 2^63))",
               "; clamp or mask the values before casting");
  }
}

// y = op(x) where op maps an Eigen array expression of acc_t<T> to another, so that exp, log and
// sqrt use Eigen's vectorised versions. Half types go through an fp32 stack buffer.
template <typename T, typename Op>
void map_unary(const T* x, T* y, int64_t n, int64_t cost, Op op) {
  using C = acc_t<T>;
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  parallel_for(n, cost, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, C>) {
      Eigen::Map<Array> out(y + b, e - b);
      out = op(Eigen::Map<const Array>(x + b, e - b));
    } else {
      constexpr int64_t kBlock = 1024;
      C buf[kBlock];
      for (int64_t s = b; s < e; s += kBlock) {
        const int64_t len = std::min(kBlock, e - s);
        convert_n(x + s, buf, len);
        Eigen::Map<Array> v(buf, len);
        v = op(v);
        convert_n(buf, y + s, len);
      }
    }
  });
}

// GELU on fp32 (and on half types through fp32), a block at a time (gelu.h); libm's scalar erf
// made GELU 11% of an AirNet step. fp64 keeps std::erf.
// y = gelu(x), or with g given y = g * gelu'(x) = g * (Phi(x) + x phi(x)).
template <typename T>
void gelu_float(const T* x, const T* g, T* y, int64_t n) {
  parallel_for(n, 30, [&](int64_t begin, int64_t end) {
    alignas(64) float xb[kGeluBlock], gb[kGeluBlock];
    for (int64_t s = begin; s < end; s += kGeluBlock) {
      const int64_t len = std::min(kGeluBlock, end - s);
      if constexpr (std::is_same_v<T, float>) {  // read and written where it is
        gelu_block(x + s, g ? g + s : nullptr, y + s, len, std::nullopt);
      } else {  // through fp32 copies, rounded to the half type next: fp32 arithmetic is enough
        convert_n(x + s, xb, len);
        if (g) convert_n(g + s, gb, len);
        gelu_block(xb, g ? gb : nullptr, xb, len, half_values<T>(false, false));  // rounded on store
        convert_n(xb, y + s, len);
      }
    }
  });
}

// ReLU and its gradient on the bits of a half type, without widening to fp32 (which made them
// three passes for one select, slower in bf16 than in fp32). With inf the type's +infinity bits:
// x < 0 (negative, not -0, not NaN) is bits in [0x8001, 0x8000 | inf]; x > 0 (not NaN) is bits in
// [1, inf]. One unsigned compare each, so the loops vectorise.
template <typename T>
void relu_half(const T* x, T* y, int64_t n) {
  const auto* in = reinterpret_cast<const uint16_t*>(x);
  auto* out = reinterpret_cast<uint16_t*>(y);
  parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const bool negative = static_cast<uint16_t>(in[i] - 0x8001) < kHalfInfBits<T>;
      out[i] = negative ? uint16_t{0} : in[i];
    }
  });
}

// y = x <= 0 ? 0 : g, elementwise over same-shape tensors (y may alias g): g passes where x is
// positive or NaN (bits above inf's with either sign), as PyTorch's threshold_backward.
template <typename T>
void relu_backward_half(const T* g, const T* x, T* y, int64_t n) {
  const auto* gb = reinterpret_cast<const uint16_t*>(g);
  const auto* xb = reinterpret_cast<const uint16_t*>(x);
  auto* out = reinterpret_cast<uint16_t*>(y);
  parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      // A mask, not `positive ? gb[i] : 0`: GCC keeps that a branch on the sign (2.4 ns a value).
      const bool positive = static_cast<uint16_t>(xb[i] - 1) < kHalfInfBits<T>;
      const bool nan = static_cast<uint16_t>(xb[i] & 0x7fff) > kHalfInfBits<T>;
      const auto keep = static_cast<uint16_t>(-static_cast<int>(positive | nan));
      out[i] = static_cast<uint16_t>(gb[i] & keep);
    }
  });
}

template <typename T>
void unary_typed(UnaryKind kind, const T* x, T* y, int64_t n, double alpha, double beta) {
  using C = acc_t<T>;
  const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
  switch (kind) {
    // * -1, not Eigen's -v: its vector negation is 0 - v, which makes -(+0) +0 (PyTorch: -0).
    case UnaryKind::Neg: return map_unary(x, y, n, 1, [](const auto& v) { return v * C(-1); });
    case UnaryKind::Exp: return map_unary(x, y, n, 16, [](const auto& v) { return exp_to_subnormals(v); });
    case UnaryKind::Log:
      // Eigen's vectorised log clamps x to the smallest normal number, so every subnormal x gave
      // log(FLT_MIN) = -87.3 (log(1e-40) is -92.1): those are scaled by 2^24 into the normals first.
      return map_unary(x, y, n, 16, [](const auto& v) {
        const C normal_min = std::numeric_limits<C>::min(), scale = C(16777216.0), log_scale = C(16.635532333438686);
        return (v < normal_min && v > C(0)).select((v * scale).log() - log_scale, v.log());
      });
    case UnaryKind::Sqrt:
      // IEEE sqrt (vsqrtps), not Eigen's fast-math one: that flushes subnormal x to 0 and is not
      // correctly rounded.
      return map_unary(x, y, n, 4, [](const auto& v) { return v.unaryExpr([](C t) { return std::sqrt(t); }); });
    case UnaryKind::Relu:  // a select, not max(x, 0): NaN must stay NaN, as in PyTorch
      if constexpr (kIsHalf<T>) return relu_half(x, y, n);
      return map_unary(x, y, n, 1, [](const auto& v) {
        return v.unaryExpr([](C t) { return t < C(0) ? C(0) : t; });
      });
    case UnaryKind::Gelu:
      if constexpr (std::is_same_v<C, float>) return gelu_float<T>(x, nullptr, y, n);
      return map_unary(x, y, n, 20, [](const auto& v) {
        return v.unaryExpr([](C t) {
          return C(0.5) * t * (C(1) + std::erf(t * static_cast<C>(kSqrtHalf)));
        });
      });
    case UnaryKind::Pow:
      // PyTorch's exponents computed as products, square roots and reciprocals (so pow(-inf, 0.5)
      // is NaN, as sqrt(-inf)); std::pow for the others.
      if (alpha == 2.0) return map_unary(x, y, n, 1, [](const auto& v) { return v.square(); });
      if (alpha == 3.0) return map_unary(x, y, n, 1, [](const auto& v) { return v * v * v; });
      if (alpha == -1.0) return map_unary(x, y, n, 1, [](const auto& v) { return v.inverse(); });
      if (alpha == -2.0) return map_unary(x, y, n, 1, [](const auto& v) { return v.square().inverse(); });
      if (alpha == 0.5 || alpha == -0.5) {
        return map_unary(x, y, n, 4, [a](const auto& v) {
          return v.unaryExpr([a](C t) { return a > C(0) ? std::sqrt(t) : C(1) / std::sqrt(t); });
        });
      }
      return map_unary(x, y, n, 20, [a](const auto& v) {
        return v.unaryExpr([a](C t) { return static_cast<C>(std::pow(t, a)); });
      });
    case UnaryKind::Affine:
      return map_unary(x, y, n, 1, [a, b](const auto& v) { return v * a + b; });
    case UnaryKind::DivScalar:
      return map_unary(x, y, n, 1, [a](const auto& v) { return v / a; });
    case UnaryKind::Clamp:  // selects, not min/max: NaN must stay NaN, as in PyTorch
      return map_unary(x, y, n, 1, [a, b](const auto& v) {
        return v.unaryExpr([a, b](C t) {
          const C low = t < a ? a : t;  // then the upper bound, so min > max gives max, as PyTorch
          return low > b ? b : low;
        });
      });
    case UnaryKind::Abs: return map_unary(x, y, n, 1, [](const auto& v) { return v.abs(); });
    case UnaryKind::Sign:  // two compares, so that NaN gives 0 (PyTorch's sign)
      return map_unary(x, y, n, 1, [](const auto& v) {
        return v.unaryExpr([](C t) { return C(t > C(0)) - C(t < C(0)); });
      });
  }
  DEMI_THROW("unary: unknown UnaryKind ", static_cast<int>(kind));
}

// Binary ops on the acc type. GeluBackward: gelu'(x) = Phi(x) + x * phi(x).
struct AddOp { template <typename C> C operator()(C a, C b) const { return a + b; } };
struct SubOp { template <typename C> C operator()(C a, C b) const { return a - b; } };
struct MulOp { template <typename C> C operator()(C a, C b) const { return a * b; } };
struct DivOp { template <typename C> C operator()(C a, C b) const { return a / b; } };
template <typename Cmp>
struct CompareOp {
  template <typename C> C operator()(C a, C b) const { return Cmp{}(a, b) ? C(1) : C(0); }
};
struct ReluBackwardOp {  // 0 where b <= 0, so that a NaN b passes a (PyTorch's threshold_backward)
  template <typename C> C operator()(C a, C b) const { return b <= C(0) ? C(0) : a; }
};
struct GeluBackwardOp {
  template <typename C> C operator()(C a, C b) const {
    const C cdf = C(0.5) * (C(1) + std::erf(b * static_cast<C>(kSqrtHalf)));
    const C pdf = std::exp(C(-0.5) * b * b) * static_cast<C>(kInvSqrt2Pi);
    return a * (cdf + b * pdf);
  }
};

// The innermost (contiguous) dimension: each operand steps by SA / SB in {0, 1}, so the loop is a
// plain vectorisable one with a broadcast operand held in a register.
// Half types convert blocks through fp32 buffers with Eigen's vectorised conversions.
template <int SA, int SB, typename T, typename Op>
void binary_row(const T* a, const T* b, T* y, int64_t n, Op op) {
  using C = acc_t<T>;
  if constexpr (kIsHalf<T> && (SA == 1 || SB == 1)) {
    constexpr int64_t kBlock = 256;
    C fa[kBlock], fb[kBlock];
    const C av = static_cast<C>(a[0]), bv = static_cast<C>(b[0]);
    for (int64_t s = 0; s < n; s += kBlock) {
      const int64_t len = std::min(kBlock, n - s);
      if constexpr (SA == 1) convert_n(a + s, fa, len);
      if constexpr (SB == 1) convert_n(b + s, fb, len);
      for (int64_t i = 0; i < len; ++i) fa[i] = op(SA == 1 ? fa[i] : av, SB == 1 ? fb[i] : bv);
      convert_n(fa, y + s, len);
    }
  } else if constexpr (SA == 0 && SB == 0) {
    const T v = T(op(static_cast<C>(a[0]), static_cast<C>(b[0])));
    std::fill(y, y + n, v);
  } else if constexpr (SA == 0) {
    const C av = static_cast<C>(a[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(av, static_cast<C>(b[i])));
  } else if constexpr (SB == 0) {
    const C bv = static_cast<C>(b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(static_cast<C>(a[i]), bv));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(static_cast<C>(a[i]), static_cast<C>(b[i])));
  }
}

template <int SA, int SB, typename T, typename Op>
void binary_strided(const BroadcastPlan<2>& p, const T* a, const T* b, T* y, int64_t n, int64_t cost, Op op) {
  parallel_for(n, cost, [&](int64_t begin, int64_t end) {
    for_each_row(p, begin, end, [&](const std::array<int64_t, 2>& at, int64_t pos, int64_t len) {
      binary_row<SA, SB>(a + at[0], b + at[1], y + pos, len, op);
    });
  });
}

template <typename T, typename Op>
void binary_typed(const BroadcastPlan<2>& p, const TensorRef& a, const TensorRef& b, const TensorRef& y,
                  int64_t cost, Op op) {
  const int64_t n = y.numel();
  const int sa = static_cast<int>(p.stride[0].back()), sb = static_cast<int>(p.stride[1].back());
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
  if (sa == 1 && sb == 1) binary_strided<1, 1>(p, pa, pb, py, n, cost, op);
  else if (sa == 1) binary_strided<1, 0>(p, pa, pb, py, n, cost, op);
  else if (sb == 1) binary_strided<0, 1>(p, pa, pb, py, n, cost, op);
  else binary_strided<0, 0>(p, pa, pb, py, n, cost, op);
}

}  // namespace

void CpuKernels::fill_impl(const TensorRef& y, double value) {
  dispatch_all(y.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (kIsFloating<T>) {
      v = round_to<T>(value);
    } else {
      DEMI_CHECK(fits_integer<T>(value), "fill: value ", value, " does not fit in ", y.dtype,
                 " tensor ", y.shape, "; fill an integer tensor with a finite value in its range");
      v = static_cast<T>(value);
    }
    T* out = y.as<T>();
    parallel_for(y.numel(), 1, [&](int64_t b, int64_t e) { std::fill(out + b, out + e, v); });
  });
}

void CpuKernels::cast_impl(const TensorRef& x, const TensorRef& y) {
  if (x.numel() == 0) return;
  if (x.dtype == y.dtype) {
    if (x.data != y.data) std::memmove(y.data, x.data, x.nbytes());
    return;
  }
  dispatch_all(x.dtype, "cast", [&](auto xtag) {
    dispatch_all(y.dtype, "cast", [&](auto ytag) { cast_typed<decltype(xtag), decltype(ytag)>(x, y); });
  });
}

void CpuKernels::unary_impl(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) {
  const char* name = unary_name(kind);
  dispatch_floating(x.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    unary_typed<T>(kind, x.as<T>(), y.as<T>(), x.numel(), alpha, beta);
  });
}

void CpuKernels::binary_impl(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const char* name = binary_name(kind);
  const BroadcastPlan<2> plan = plan_broadcast<2>(name, {"a", "b"}, {&a.shape, &b.shape}, y.shape);
  if (y.numel() == 0) return;
  dispatch_floating(y.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
      case BinaryKind::Add: return binary_typed<T>(plan, a, b, y, 1, AddOp{});
      case BinaryKind::Sub: return binary_typed<T>(plan, a, b, y, 1, SubOp{});
      case BinaryKind::Mul: return binary_typed<T>(plan, a, b, y, 1, MulOp{});
      case BinaryKind::Div: return binary_typed<T>(plan, a, b, y, 2, DivOp{});
      case BinaryKind::ReluBackward:
        if constexpr (kIsHalf<T>) {
          if (a.numel() == y.numel() && b.numel() == y.numel()) {  // autograd's case: no broadcasting
            return relu_backward_half<T>(a.as<T>(), b.as<T>(), y.as<T>(), y.numel());
          }
        }
        return binary_typed<T>(plan, a, b, y, 1, ReluBackwardOp{});
      case BinaryKind::GeluBackward:
        if constexpr (std::is_same_v<acc_t<T>, float>) {
          if (a.numel() == y.numel() && b.numel() == y.numel()) {  // autograd's case: no broadcasting
            return gelu_float<T>(b.as<T>(), a.as<T>(), y.as<T>(), y.numel());
          }
        }
        return binary_typed<T>(plan, a, b, y, 30, GeluBackwardOp{});
      case BinaryKind::Eq: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::equal_to<>>{});
      case BinaryKind::Ne: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::not_equal_to<>>{});
      case BinaryKind::Lt: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::less<>>{});
      case BinaryKind::Le: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::less_equal<>>{});
      case BinaryKind::Gt: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::greater<>>{});
      case BinaryKind::Ge: return binary_typed<T>(plan, a, b, y, 1, CompareOp<std::greater_equal<>>{});
    }
    DEMI_THROW("binary: unknown BinaryKind ", static_cast<int>(kind));
  });
}

}  // namespace demi::backend::cpu

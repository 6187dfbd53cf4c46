// CpuKernels::batch_norm_backward_impl: batch_norm.cpp's forward, differentiated (the formulas at
// `backward`, below), with a fused activation's gradient recomputed from x and the forward's
// coefficients.
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/batch_norm_channel.h"
#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/gelu.h"
#include "backends/cpu/isa/isa.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

using namespace batch_norm_channel;

// Where a channel's y = ((x - hi) - lo) * scale + shift is above the band, as a test on x alone.
// Each step is one separately rounded operation (this file is built without contraction), so y is
// monotone in x, and "y > band" is "x > t" for scale > 0, "x < t" for scale < 0, for one t found by
// bisection over the floats with the forward's very arithmetic; for scale = 0 (a zero weight, rare)
// y is computed as the forward did. A compare per value instead of recomputing y (which cost more
// than the separate ReLU it replaces).
template <typename T>
class ReluMask {
 public:
  using Acc = acc_t<T>;
  using Key = std::conditional_t<sizeof(Acc) == 4, int32_t, int64_t>;
  using UKey = std::make_unsigned_t<Key>;

  ReluMask() = default;  // masks everything
  explicit ReluMask(const NormCoef<Acc>& k) : k_(k) {
    const Acc band = relu_zero_band<T>();
    if (k.scale == Acc(0)) return;
    auto keep = [&](Key key) { return normalized(from_key(key), k) > band; };
    const Acc inf = std::numeric_limits<Acc>::infinity();
    Key lo = to_key(std::numeric_limits<Acc>::lowest()), hi = to_key(std::numeric_limits<Acc>::max());
    const bool lo_keeps = keep(lo), hi_keeps = keep(hi);
    side_ = k.scale > Acc(0) ? 1 : -1;
    if (lo_keeps == hi_keeps) {  // every finite x alike; an infinite one gives y = +-inf
      if (side_ > 0) t_ = lo_keeps ? -inf : from_key(hi);
      if (side_ < 0) t_ = lo_keeps ? inf : from_key(lo);
      return;
    }
    while (static_cast<UKey>(hi) - static_cast<UKey>(lo) > 1) {  // keep(lo) != keep(hi) throughout
      const Key mid = static_cast<Key>(static_cast<UKey>(lo) + (static_cast<UKey>(hi) - static_cast<UKey>(lo)) / 2);
      (keep(mid) == hi_keeps ? hi : lo) = mid;
    }
    t_ = side_ > 0 ? from_key(lo) : from_key(hi);  // x above the last dropped, or below the first
  }

  // The same mask for the ISA level's half passes (isa::BatchNormHalf).
  isa::BnReluMask isa_mask() const {
    static_assert(std::is_same_v<Acc, float>, "the half passes take fp32 coefficients");
    return {side_, t_, {k_.hi, k_.lo, k_.scale, k_.shift}, relu_zero_band<T>()};
  }

  // out = g where y > band, else 0.
  void apply(const Acc* x, const Acc* g, Acc* out, int64_t len) const {
    // g read unconditionally: then each loop is a compare and an and, not a masked load.
    if (side_ > 0) {
      for (int64_t i = 0; i < len; ++i) {
        const Acc gi = g[i];
        out[i] = x[i] > t_ ? gi : Acc(0);
      }
    } else if (side_ < 0) {
      for (int64_t i = 0; i < len; ++i) {
        const Acc gi = g[i];
        out[i] = x[i] < t_ ? gi : Acc(0);
      }
    } else {
      const Acc band = relu_zero_band<T>();
      for (int64_t i = 0; i < len; ++i) out[i] = normalized(x[i], k_) > band ? g[i] : Acc(0);
    }
  }

 private:
  // Floats in order as integers: the sign-magnitude bits folded so that comparing keys compares
  // values (-0 and +0 are neighbours; NaN is never asked for).
  static Key to_key(Acc v) {
    Key bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits < 0 ? std::numeric_limits<Key>::min() - bits : bits;
  }
  static Acc from_key(Key key) {
    const Key bits = key < 0 ? std::numeric_limits<Key>::min() - key : key;
    Acc v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }

  NormCoef<Acc> k_{};  // all zero by default: y = 0, nothing kept
  int side_ = 0;       // 1: keep x > t; -1: keep x < t; 0: keep where y itself is above the band
  Acc t_ = 0;
};

// Room for a masked gradient of up to `len` values in this thread's scratch, handed out at the
// same offset within a 64-byte line as the gradient it replaces: Eigen's sums start at the first
// aligned packet, so the same values elsewhere would be summed in another order than a separate
// ReLU's output (allocated aligned, like grad_output) and differ in the last bit.
template <typename Acc>
class MaskedGrad {
 public:
  MaskedGrad() = default;
  // Room for `planes` gradients of up to `len` values each, side by side.
  MaskedGrad(int64_t len, int64_t planes = 1)
      : stride_((len + 2 * kLine - 1) / kLine * kLine), base_(thread_scratch<Acc>(kSlotMasked, planes * stride_)) {}
  explicit operator bool() const { return base_ != nullptr; }
  Acc* like(const Acc* g, int64_t plane = 0) const {
    return base_ + plane * stride_ + reinterpret_cast<uintptr_t>(g) % 64 / sizeof(Acc);
  }

 private:
  static constexpr int64_t kLine = 64 / sizeof(Acc);
  int64_t stride_ = 0;
  Acc* base_ = nullptr;
};

// The fused GELU's backward: out = g * gelu'(y) with y recomputed from x (the forward's arithmetic,
// bit for bit: this file is built without contraction), rounded as a separate GELU's stored input
// and output are for half types (gelu_block does both), so that out is the gradient a separate
// GELU would pass back.
template <typename T>
class GeluGrad {
 public:
  using Acc = acc_t<T>;
  GeluGrad() = default;
  explicit GeluGrad(const NormCoef<Acc>& k) : k_(k) {}
  void apply(const Acc* x, const Acc* g, Acc* out, int64_t len) const {
    if constexpr (std::is_same_v<Acc, float>) {
      alignas(64) float y[kGeluBlock];
      for (int64_t s = 0; s < len; s += kGeluBlock) {
        const int64_t n = std::min(kGeluBlock, len - s);
        for (int64_t i = 0; i < n; ++i) y[i] = normalized(x[s + i], k_);
        gelu_block(y, g + s, out + s, n, half_values<T>(true, true));
      }
    } else {
      DEMI_INTERNAL_CHECK(false, "batch_norm: a fused GELU on float64 (the checks refuse it)");
    }
  }

 private:
  NormCoef<Acc> k_{};
};

// grad_x = g * k_g + (x - mean) * k_d + k_0 for channel c (the formulas at `backward`, below).
template <typename Acc>
struct GradCoef {
  Acc k_g, k_d, k_0;
};
template <typename Acc, typename S>
GradCoef<Acc> grad_coef(const BatchNormArgs& a, const BnGeom& g, int64_t c, double invstd, double sum_g, double sum_gd) {
  const S* weight = a.weight.defined() ? a.weight.as<S>() : nullptr;
  const double count = static_cast<double>(g.count());
  const double k = invstd * (weight ? static_cast<double>(weight[c]) : 1.0);
  return {static_cast<Acc>(k), static_cast<Acc>(-k * invstd * invstd * sum_gd / count), static_cast<Acc>(-k * sum_g / count)};
}

// Channel c of a half backward (the formulas are `backward`'s, below): the gradient's two sums, then
// grad_x, as the ISA level's passes over the planes, a fused ReLU's mask applied inside them.
template <typename T, typename S>
void backward_half_channel(const BatchNormArgs& a, const BnGeom& g, int64_t c) {
  const isa::BatchNormHalf& bn = half_passes<T>();
  const uint16_t* x = bits_of<T>(a.input);
  const uint16_t* gy = bits_of<T>(a.grad_output);
  uint16_t* gx = a.grad_input.defined() ? mutable_bits_of<T>(a.grad_input) : nullptr;
  const double mean = static_cast<double>(a.save_mean.as<S>()[c]);
  const double invstd = static_cast<double>(a.save_invstd.as<S>()[c]);
  const float mean_acc = static_cast<float>(mean);
  isa::BnReluMask mask{isa::BnReluMask::kNone, 0.0f, {}, 0.0f};
  // A fused GELU's gradient, g * gelu'(y) rounded to T as a separate GELU passes it back: the
  // channel's planes side by side, made once for both passes.
  uint16_t* gelu_grad = nullptr;
  if (a.activation != BatchNormActivation::None) {
    const S* coef = a.activation_coef.as<S>();
    const NormCoef<float> k{coef[c], coef[g.c + c], coef[2 * g.c + c], coef[3 * g.c + c]};
    if (a.activation == BatchNormActivation::Relu) {
      mask = ReluMask<T>(k).isa_mask();
    } else {
      gelu_grad = thread_scratch<uint16_t>(kSlotMasked, g.count());
      float* xs = thread_scratch<float>(kSlotX, g.hw);
      float* gs = thread_scratch<float>(kSlotG, g.hw);
      float* out = thread_scratch<float>(kSlotY, g.hw);
      for (int64_t n = 0; n < g.n; ++n) {
        convert_n(reinterpret_cast<const T*>(half_plane(x, g, n, c)), xs, g.hw);
        convert_n(reinterpret_cast<const T*>(half_plane(gy, g, n, c)), gs, g.hw);
        GeluGrad<T>(k).apply(xs, gs, out, g.hw);
        convert_n(out, reinterpret_cast<T*>(gelu_grad + n * g.hw), g.hw);  // exact: already rounded to T
      }
    }
  }
  auto g_plane = [&](int64_t n) { return gelu_grad ? gelu_grad + n * g.hw : half_plane(gy, g, n, c); };
  double sum_g = 0, sum_gd = 0;  // sum(g), sum(g * (x - mean))
  bn.gradient_sums({half_plane(x, g, 0, c), g.n, g.hw, g.c * g.hw}, g_plane(0), gelu_grad ? g.hw : g.c * g.hw,
                   mean_acc, mask, &sum_g, &sum_gd);
  if (a.grad_weight.defined()) a.grad_weight.as<S>()[c] = static_cast<S>(sum_gd * invstd);
  if (a.grad_bias.defined()) a.grad_bias.as<S>()[c] = static_cast<S>(sum_g);
  if (!gx) return;
  const auto [k_g, k_d, k_0] = grad_coef<float, S>(a, g, c, invstd, sum_g, sum_gd);
  for (int64_t n = 0; n < g.n; ++n) {
    if (n + 1 < g.n) prefetch_values<1>(half_plane(gx, g, n + 1, c), g.hw);
    bn.grad_input(half_plane(x, g, n, c), g_plane(n), half_plane(gx, g, n, c), g.hw, mean_acc, mask, k_g, k_d, k_0);
  }
}

// grad_x = invstd * w * (g - mean(g) - xhat * mean(g * xhat)), grad_w = sum(g * xhat),
// grad_b = sum(g), with xhat = (x - mean) * invstd from the forward's saved statistics. With a
// fused ReLU, g is grad_output masked where the forward's y was not positive; with a fused GELU,
// grad_output times gelu'(y).
template <typename T, typename S>
void backward(const BatchNormArgs& a, const BnGeom& g) {
  using Acc = acc_t<T>;
  const T* x = a.input.as<T>();
  const T* gy = a.grad_output.as<T>();
  T* gx = a.grad_input.defined() ? a.grad_input.as<T>() : nullptr;
  const S* coef = a.activation != BatchNormActivation::None ? a.activation_coef.as<S>() : nullptr;
  const bool relu = a.activation == BatchNormActivation::Relu;
  parallel_for(g.c, 3 * g.count(), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if constexpr (kHalf<T>) {
        if (half_planes<T>(g)) {
          backward_half_channel<T, S>(a, g, c);
          continue;
        }
      }
      const double mean = static_cast<double>(a.save_mean.as<S>()[c]);
      const double invstd = static_cast<double>(a.save_invstd.as<S>()[c]);
      const Acc mean_acc = static_cast<Acc>(mean);
      const ChannelPlanes<T> xs(x, g, c, kSlotX, 2), gs(gy, g, c, kSlotG, 2);
      const Acc* x_whole = xs.widened();
      const Acc* g_whole = gs.widened();
      const bool whole = x_whole && g_whole;
      // With a fused activation, the gradient of y (masked for a ReLU, times gelu'(y) for a GELU):
      // the whole channel once, or plane by plane in each pass (masking again is a compare per
      // value; a channel-sized copy read back was slower).
      ReluMask<T> relu_mask;
      GeluGrad<T> gelu_grad;
      MaskedGrad<Acc> masked;
      if (coef) {
        const NormCoef<Acc> k{coef[c], coef[g.c + c], coef[2 * g.c + c], coef[3 * g.c + c]};
        if (relu) relu_mask = ReluMask<T>(k); else gelu_grad = GeluGrad<T>(k);
        // A GELU's gradient is kept for the second pass, plane by plane (computing it again cost
        // more than the separate GELU's pass it replaces); a ReLU's mask is redone.
        masked = whole ? MaskedGrad<Acc>(g.count()) : relu ? MaskedGrad<Acc>(g.hw) : MaskedGrad<Acc>(g.hw, g.n);
      }
      auto activation_grad = [&](const Acc* xp, const Acc* gp, Acc* out, int64_t len) {
        if (relu) relu_mask.apply(xp, gp, out, len); else gelu_grad.apply(xp, gp, out, len);
      };
      if (whole && masked) {
        Acc* out = masked.like(g_whole);
        activation_grad(x_whole, g_whole, out, g.count());
        g_whole = out;
      }
      // Plane n of the gradient in pass 1 or 2 (after a ReLU: valid until the next call).
      auto g_plane = [&](int64_t n, const Acc* xp, int pass) {
        const Acc* gn = gs.plane(n);
        if (!masked) return gn;
        Acc* out = masked.like(gn, relu ? 0 : n);
        if (relu || pass == 1) activation_grad(xp, gn, out, g.hw);
        return static_cast<const Acc*>(out);
      };
      double sum_g = 0, sum_gd = 0;  // sum(g), sum(g * (x - mean))
      if (whole) {
        sum_g = sum_double(g_whole, g.count());
        sum_gd = sum_blocks(g.count(), [&](int64_t i, int64_t len) {
          return (ConstArrayMap<Acc>(g_whole + i, len) * (ConstArrayMap<Acc>(x_whole + i, len) - mean_acc)).sum();
        });
      } else {
        for (int64_t n = 0; n < g.n; ++n) {
          xs.prefetch(n + 1), gs.prefetch(n + 1);
          const ConstArrayMap<Acc> xp(xs.plane(n), g.hw);
          const ConstArrayMap<Acc> gp(g_plane(n, xp.data(), 1), g.hw);
          sum_g += sum_double(gp.data(), g.hw);
          sum_gd += static_cast<double>((gp * (xp - mean_acc)).sum());
        }
      }
      if (a.grad_weight.defined()) a.grad_weight.as<S>()[c] = static_cast<S>(sum_gd * invstd);
      if (a.grad_bias.defined()) a.grad_bias.as<S>()[c] = static_cast<S>(sum_g);
      if (!gx) continue;
      const auto [k_g, k_d, k_0] = grad_coef<Acc, S>(a, g, c, invstd, sum_g, sum_gd);
      if (whole) {  // the channel in one expression, then rounded plane by plane
        Acc* buf = thread_scratch<Acc>(kSlotY, g.count());
        ArrayMap<Acc>(buf, g.count()) = ConstArrayMap<Acc>(g_whole, g.count()) * k_g +
                                        (ConstArrayMap<Acc>(x_whole, g.count()) - mean_acc) * k_d + k_0;
        store_channel(buf, gx, g, c);
        continue;
      }
      for (int64_t n = 0; n < g.n; ++n) {
        const int64_t off = (n * g.c + c) * g.hw;
        if (n + 1 < g.n) prefetch_values<1>(gx + off + g.c * g.hw, g.hw);
        const ConstArrayMap<Acc> xp(xs.plane(n), g.hw);
        const ConstArrayMap<Acc> gp(g_plane(n, xp.data(), 2), g.hw);
        if constexpr (std::is_same_v<T, Acc>) {
          ArrayMap<T>(gx + off, g.hw) = gp * k_g + (xp - mean_acc) * k_d + k_0;
        } else {
          Acc* buf = thread_scratch<Acc>(kSlotY, g.hw);
          ArrayMap<Acc>(buf, g.hw) = gp * k_g + (xp - mean_acc) * k_d + k_0;
          convert_n(buf, gx + off, g.hw);
        }
      }
    }
  });
}

}  // namespace

void CpuKernels::batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_backward";
  dispatch_bn(args.input.dtype, op, [&](auto t, auto st) { backward<decltype(t), decltype(st)>(args, g); });
}

}  // namespace demi::backend::cpu

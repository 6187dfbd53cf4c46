// CpuKernels::batch_norm_*: per-channel normalisation of [N, C] or [N, C, H, W], one channel per
// task. Statistics are fp32 (fp64 for fp64 input, for gradcheck), summed plane by plane into double
// and formed in two passes (mean, then squared deviations) so that a large mean does not cancel.
#include <cmath>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

enum Slot { kSlotX = 0, kSlotG = 1, kSlotY = 2 };

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Plane (n, c) of x as acc_t<T>: in place for fp32/fp64, else widened into this thread's `slot`.
template <typename T>
const acc_t<T>* load_plane(const T* x, int64_t hw, int slot) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return x;
  } else {
    acc_t<T>* out = thread_scratch<acc_t<T>>(slot, hw);
    convert_n(x, out, hw);
    return out;
  }
}

// The N planes of one channel as acc_t<T>. With `passes` > 1, half types are widened once, into
// this thread's `slot`, when the channel fits kWidenedChannelBytes (the passes then read fp32 from
// cache instead of converting again: BatchNorm's repeated conversions were about a tenth of a bf16
// SmallCNN step); otherwise each plane is widened when it is read. fp32 and fp64 planes smaller
// than kGatheredPlane values are copied together the same way when the whole channel fits
// kWholeChannelBytes: plane by plane, AirNet's 7x7 and 3x3 batch norms ran at 3-7 GB/s, their
// time in per-plane calls of 49 or 9 values (gathered: 1.3-3x faster; 15x15 planes ran 10% slower).
template <typename T>
class ChannelPlanes {
 public:
  static constexpr int64_t kWidenedChannelBytes = int64_t{4} << 20;
  static constexpr int64_t kGatheredPlane = 100;

  ChannelPlanes(const T* x, const BnGeom& g, int64_t c, int slot, int passes)
      : x_(x), g_(g), c_(c), slot_(slot) {
    const int64_t bytes = g.count() * static_cast<int64_t>(sizeof(acc_t<T>));
    const bool widen = std::is_same_v<T, acc_t<T>> ? g.hw < kGatheredPlane && bytes <= kWholeChannelBytes
                                                   : bytes <= kWidenedChannelBytes;
    if (passes > 1 && widen) {
      widened_ = thread_scratch<acc_t<T>>(slot, g.count());
      for (int64_t n = 0; n < g.n; ++n) convert_n(x + (n * g.c + c) * g.hw, widened_ + n * g.hw, g.hw);
    }
  }
  // Plane n; without the widened copy it stays valid until the next call.
  const acc_t<T>* plane(int64_t n) const {
    if (widened_) return widened_ + n * g_.hw;
    return load_plane(x_ + (n * g_.c + c_) * g_.hw, g_.hw, slot_);
  }
  // The whole channel widened (N planes back to back) when it is at most kWholeChannelBytes, or
  // nullptr: the passes then take the channel in a few long calls instead of plane by plane (a
  // 3x3 plane is 9 values), with one more channel-sized buffer (at 32x32, 128 images, the two
  // buffers outgrew L2 and ran 5-15% slower than plane by plane).
  static constexpr int64_t kWholeChannelBytes = int64_t{256} << 10;
  const acc_t<T>* widened() const {
    return g_.count() * static_cast<int64_t>(sizeof(acc_t<T>)) <= kWholeChannelBytes ? widened_ : nullptr;
  }

 private:
  const T* x_;
  const BnGeom& g_;
  int64_t c_;
  int slot_;
  acc_t<T>* widened_ = nullptr;
};

// A whole widened channel's values are summed in blocks of kSumBlock, in fp32 within a block and
// fp64 across blocks: one call per block instead of per plane (the per-plane calls made AirNet's
// bf16 batch norms on 3x3 planes run at a fifth of the 32x32 ones' GB/s), and fp32 sums no longer
// than a 32x32 plane's, as before.
constexpr int64_t kSumBlock = 1024;

// The sum of block_sum(i, len) over the blocks [i, i + len) of [0, count): each an fp32 sum of
// at most kSumBlock values, added in fp64.
template <typename BlockSum>
double sum_blocks(int64_t count, BlockSum&& block_sum) {
  double sum = 0;
  for (int64_t i = 0; i < count; i += kSumBlock) sum += static_cast<double>(block_sum(i, std::min(kSumBlock, count - i)));
  return sum;
}

// Writes a channel's N planes from buf (back to back) into the NCHW tensor out, rounded once.
template <typename T>
void store_channel(const acc_t<T>* buf, T* out, const BnGeom& g, int64_t c) {
  for (int64_t n = 0; n < g.n; ++n) convert_n(buf + n * g.hw, out + (n * g.c + c) * g.hw, g.hw);
}

// y = (x - mean) * scale + shift over one plane, rounded once into T. The mean comes as hi + lo
// (hi = the mean rounded to Acc): x - hi is exact for x near the mean, so a large mean (say 1000
// over a spread of 1) costs no accuracy in fp32.
template <typename T>
void normalize_plane(const acc_t<T>* x, T* y, int64_t hw, acc_t<T> mean_hi, acc_t<T> mean_lo, acc_t<T> scale,
                     acc_t<T> shift) {
  using Acc = acc_t<T>;
  const ConstArrayMap<Acc> xp(x, hw);
  if constexpr (std::is_same_v<T, Acc>) {
    ArrayMap<T>(y, hw) = ((xp - mean_hi) - mean_lo) * scale + shift;
  } else {
    Acc* buf = thread_scratch<Acc>(kSlotY, hw);
    ArrayMap<Acc>(buf, hw) = ((xp - mean_hi) - mean_lo) * scale + shift;
    convert_n(buf, y, hw);
  }
}

template <typename T, typename S>
void forward(const BatchNormArgs& a, const BnGeom& g) {
  using Acc = acc_t<T>;
  const T* x = a.input.as<T>();
  T* y = a.output.as<T>();
  const S* weight = a.weight.defined() ? a.weight.as<S>() : nullptr;
  const S* bias = a.bias.defined() ? a.bias.as<S>() : nullptr;
  const double count = static_cast<double>(g.count());
  const bool train = a.mode == BatchNormMode::Train;
  parallel_for(g.c, 3 * g.count(), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const ChannelPlanes<T> xs(x, g, c, kSlotX, train ? 3 : 1);  // eval: only the normalising pass
      double mean, invstd;
      const Acc* whole = xs.widened();
      if (train) {
        // Pass 1 sums in double: a plane of large values summed in fp32 would shift the mean.
        double sum = 0;
        if (whole) {
          sum = sum_double(whole, g.count());
        } else {
          for (int64_t n = 0; n < g.n; ++n) sum += sum_double(xs.plane(n), g.hw);
        }
        mean = sum / count;
        // Pass 2: squared deviations are positive, so Acc sums of a plane or block lose nothing to
        // cancellation.
        const Acc hi = static_cast<Acc>(mean), lo = static_cast<Acc>(mean - static_cast<double>(hi));
        double sq = 0;
        if (whole) {
          sq = sum_blocks(g.count(), [&](int64_t i, int64_t len) {
            return ((ConstArrayMap<Acc>(whole + i, len) - hi) - lo).square().sum();
          });
        } else {
          for (int64_t n = 0; n < g.n; ++n) {
            const ConstArrayMap<Acc> p(xs.plane(n), g.hw);
            sq += static_cast<double>(((p - hi) - lo).square().sum());
          }
        }
        const double var = sq / count;
        invstd = 1.0 / std::sqrt(var + a.eps);
        if (a.save_mean.defined()) a.save_mean.as<S>()[c] = static_cast<S>(mean);
        if (a.save_invstd.defined()) a.save_invstd.as<S>()[c] = static_cast<S>(invstd);
        const double m = a.momentum;
        if (a.running_mean.defined()) {
          S& rm = a.running_mean.as<S>()[c];
          rm = static_cast<S>((1 - m) * static_cast<double>(rm) + m * mean);
        }
        if (a.running_var.defined()) {
          S& rv = a.running_var.as<S>()[c];
          rv = static_cast<S>((1 - m) * static_cast<double>(rv) + m * var * count / (count - 1));
        }
      } else {
        mean = static_cast<double>(a.running_mean.as<S>()[c]);
        invstd = 1.0 / std::sqrt(static_cast<double>(a.running_var.as<S>()[c]) + a.eps);
      }
      const Acc hi = static_cast<Acc>(mean), lo = static_cast<Acc>(mean - static_cast<double>(hi));
      const Acc scale = static_cast<Acc>(invstd * (weight ? static_cast<double>(weight[c]) : 1.0));
      const Acc shift = static_cast<Acc>(bias ? static_cast<double>(bias[c]) : 0.0);
      if (whole) {  // the channel in one expression, then rounded plane by plane
        Acc* buf = thread_scratch<Acc>(kSlotY, g.count());
        ArrayMap<Acc>(buf, g.count()) = ((ConstArrayMap<Acc>(whole, g.count()) - hi) - lo) * scale + shift;
        store_channel(buf, y, g, c);
        continue;
      }
      for (int64_t n = 0; n < g.n; ++n) {
        const int64_t off = (n * g.c + c) * g.hw;
        normalize_plane(xs.plane(n), y + off, g.hw, hi, lo, scale, shift);
      }
    }
  });
}

// grad_x = invstd * w * (g - mean(g) - xhat * mean(g * xhat)), grad_w = sum(g * xhat),
// grad_b = sum(g), with xhat = (x - mean) * invstd from the forward's saved statistics.
template <typename T, typename S>
void backward(const BatchNormArgs& a, const BnGeom& g) {
  using Acc = acc_t<T>;
  const T* x = a.input.as<T>();
  const T* gy = a.grad_output.as<T>();
  T* gx = a.grad_input.defined() ? a.grad_input.as<T>() : nullptr;
  const S* weight = a.weight.defined() ? a.weight.as<S>() : nullptr;
  const double count = static_cast<double>(g.count());
  parallel_for(g.c, 3 * g.count(), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const double mean = static_cast<double>(a.save_mean.as<S>()[c]);
      const double invstd = static_cast<double>(a.save_invstd.as<S>()[c]);
      const Acc mean_acc = static_cast<Acc>(mean);
      const ChannelPlanes<T> xs(x, g, c, kSlotX, 2), gs(gy, g, c, kSlotG, 2);
      const Acc* x_whole = xs.widened();
      const Acc* g_whole = gs.widened();
      const bool whole = x_whole && g_whole;
      double sum_g = 0, sum_gd = 0;  // sum(g), sum(g * (x - mean))
      if (whole) {
        sum_g = sum_double(g_whole, g.count());
        sum_gd = sum_blocks(g.count(), [&](int64_t i, int64_t len) {
          return (ConstArrayMap<Acc>(g_whole + i, len) * (ConstArrayMap<Acc>(x_whole + i, len) - mean_acc)).sum();
        });
      } else {
        for (int64_t n = 0; n < g.n; ++n) {
          const ConstArrayMap<Acc> xp(xs.plane(n), g.hw);
          const ConstArrayMap<Acc> gp(gs.plane(n), g.hw);
          sum_g += sum_double(gp.data(), g.hw);
          sum_gd += static_cast<double>((gp * (xp - mean_acc)).sum());
        }
      }
      if (a.grad_weight.defined()) a.grad_weight.as<S>()[c] = static_cast<S>(sum_gd * invstd);
      if (a.grad_bias.defined()) a.grad_bias.as<S>()[c] = static_cast<S>(sum_g);
      if (!gx) continue;
      const double k = invstd * (weight ? static_cast<double>(weight[c]) : 1.0);
      const Acc k_g = static_cast<Acc>(k);
      const Acc k_d = static_cast<Acc>(-k * invstd * invstd * sum_gd / count);
      const Acc k_0 = static_cast<Acc>(-k * sum_g / count);
      if (whole) {  // the channel in one expression, then rounded plane by plane
        Acc* buf = thread_scratch<Acc>(kSlotY, g.count());
        ArrayMap<Acc>(buf, g.count()) = ConstArrayMap<Acc>(g_whole, g.count()) * k_g +
                                        (ConstArrayMap<Acc>(x_whole, g.count()) - mean_acc) * k_d + k_0;
        store_channel(buf, gx, g, c);
        continue;
      }
      for (int64_t n = 0; n < g.n; ++n) {
        const int64_t off = (n * g.c + c) * g.hw;
        const ConstArrayMap<Acc> xp(xs.plane(n), g.hw);
        const ConstArrayMap<Acc> gp(gs.plane(n), g.hw);
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

// Calls fn(T{}, S{}) with the input's type T and the statistics' type S.
template <typename Fn>
void dispatch_bn(DType dtype, const char* op, Fn&& fn) {
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      fn(T{}, double{});
    } else {
      fn(T{}, float{});
    }
  });
}

}  // namespace

void CpuKernels::batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_forward";
  dispatch_bn(args.input.dtype, op, [&](auto t, auto st) { forward<decltype(t), decltype(st)>(args, g); });
}

void CpuKernels::batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_backward";
  dispatch_bn(args.input.dtype, op, [&](auto t, auto st) { backward<decltype(t), decltype(st)>(args, g); });
}

}  // namespace demi::backend::cpu

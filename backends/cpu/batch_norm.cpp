// CpuKernels::batch_norm_forward_impl (the backward: batch_norm_backward.cpp): per-channel
// normalisation of [N, C] or [N, C, H, W], one channel per task. Statistics are fp32 (fp64 for fp64
// input, for gradcheck), summed plane by plane into double and formed in two passes (mean, then
// squared deviations) so that a large mean does not cancel. Half planes (bf16, fp16) of
// kGatheredPlane values or more are read and written as half values by the ISA level's passes
// (isa::BatchNormHalf); smaller ones are widened into fp32 buffers (ChannelPlanes).
#include <cmath>
#include <cstdint>
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

// out = y over len values, or with a fused ReLU y with what would store as a negative zeroed.
// One loop either way: a second pass for the ReLU made bf16's fused forward slower than batch
// norm and the separate ReLU (which works on the 16-bit values).
template <typename T>
void normalize(const acc_t<T>* x, acc_t<T>* out, int64_t len, const NormCoef<acc_t<T>>& k, bool relu) {
  using Acc = acc_t<T>;
  if (!relu) {
    for (int64_t i = 0; i < len; ++i) out[i] = normalized(x[i], k);
    return;
  }
  const Acc band = relu_zero_band<T>();
  for (int64_t i = 0; i < len; ++i) {
    const Acc y = normalized(x[i], k);
    out[i] = y < -band ? Acc(0) : y;
  }
}

// The fused GELU's forward: buf's len values of y become gelu(y), computed as a separate GELU
// computes it from the stored y (gelu.h's block kernel: a half y rounded first; the result is
// rounded where buf is stored).
template <typename T>
void gelu_in_place(acc_t<T>* buf, int64_t len) {
  if constexpr (std::is_same_v<acc_t<T>, float>) {
    for (int64_t s = 0; s < len; s += kGeluBlock) {
      gelu_block(buf + s, nullptr, buf + s, std::min(kGeluBlock, len - s), half_values<T>(true, false));
    }
  } else {
    DEMI_INTERNAL_CHECK(false, "batch_norm: a fused GELU on float64 (the checks refuse it)");
  }
}

// Channel c's mean and invstd in eval mode, from the running statistics.
template <typename S>
void eval_statistics(const BatchNormArgs& a, int64_t c, double& mean, double& invstd) {
  mean = static_cast<double>(a.running_mean.as<S>()[c]);
  invstd = 1.0 / std::sqrt(static_cast<double>(a.running_var.as<S>()[c]) + a.eps);
}

// A channel's statistics from its sum and its sum of squared deviations from the mean (NormCoef's
// hi + lo): saved for the backward and folded into the running ones. Returns invstd.
template <typename S>
double train_statistics(const BatchNormArgs& a, const BnGeom& g, int64_t c, double mean, double sq) {
  const double count = static_cast<double>(g.count());
  const double var = sq / count;
  const double invstd = 1.0 / std::sqrt(var + a.eps);
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
  return invstd;
}

// What normalises channel c; kept in activation_coef when an activation is fused (its backward
// recomputes y from x).
template <typename Acc, typename S>
NormCoef<Acc> norm_coef(const BatchNormArgs& a, const BnGeom& g, int64_t c, double mean, double invstd) {
  const S* weight = a.weight.defined() ? a.weight.as<S>() : nullptr;
  const S* bias = a.bias.defined() ? a.bias.as<S>() : nullptr;
  const Acc hi = static_cast<Acc>(mean);
  const NormCoef<Acc> k{hi, static_cast<Acc>(mean - static_cast<double>(hi)),
                        static_cast<Acc>(invstd * (weight ? static_cast<double>(weight[c]) : 1.0)),
                        static_cast<Acc>(bias ? static_cast<double>(bias[c]) : 0.0)};
  if (a.activation != BatchNormActivation::None) {
    S* coef = a.activation_coef.as<S>();
    coef[c] = k.hi, coef[g.c + c] = k.lo, coef[2 * g.c + c] = k.scale, coef[3 * g.c + c] = k.shift;
  }
  return k;
}

inline isa::BnNorm bn_norm(const NormCoef<float>& k) { return {k.hi, k.lo, k.scale, k.shift}; }

// Channel c of a half forward: sum, squared deviations and normalisation as the ISA level's
// passes over the planes (a fused GELU normalises into fp32 for gelu_block, plane by plane).
template <typename T, typename S>
void forward_half_channel(const BatchNormArgs& a, const BnGeom& g, int64_t c) {
  const isa::BatchNormHalf& bn = half_passes<T>();
  const uint16_t* x = bits_of<T>(a.input);
  uint16_t* y = mutable_bits_of<T>(a.output);
  double mean, invstd;
  if (a.mode == BatchNormMode::Train) {
    const isa::BnPlanes planes{half_plane(x, g, 0, c), g.n, g.hw, g.c * g.hw};
    mean = bn.sum(planes) / static_cast<double>(g.count());
    const float hi = static_cast<float>(mean), lo = static_cast<float>(mean - static_cast<double>(hi));
    invstd = train_statistics<S>(a, g, c, mean, bn.sum_squared_deviations(planes, hi, lo));
  } else {
    eval_statistics<S>(a, c, mean, invstd);
  }
  const NormCoef<float> k = norm_coef<float, S>(a, g, c, mean, invstd);
  const bool gelu = a.activation == BatchNormActivation::Gelu;
  const float relu_band = a.activation == BatchNormActivation::Relu ? relu_zero_band<T>() : -1.0f;
  for (int64_t n = 0; n < g.n; ++n) {
    const uint16_t* xp = half_plane(x, g, n, c);
    uint16_t* yp = half_plane(y, g, n, c);
    if (n + 1 < g.n) prefetch_values<1>(half_plane(y, g, n + 1, c), g.hw);
    if (!gelu) {
      bn.normalize(xp, yp, g.hw, bn_norm(k), relu_band);
      continue;
    }
    float* buf = thread_scratch<float>(kSlotY, g.hw);  // the GELU works on fp32 y (gelu_block)
    convert_n(reinterpret_cast<const T*>(xp), buf, g.hw);
    normalize<T>(buf, buf, g.hw, k, false);
    gelu_in_place<T>(buf, g.hw);
    convert_n(buf, reinterpret_cast<T*>(yp), g.hw);
  }
}

template <typename T, typename S>
void forward(const BatchNormArgs& a, const BnGeom& g) {
  using Acc = acc_t<T>;
  const T* x = a.input.as<T>();
  T* y = a.output.as<T>();
  const bool train = a.mode == BatchNormMode::Train;
  const bool relu = a.activation == BatchNormActivation::Relu, gelu = a.activation == BatchNormActivation::Gelu;
  parallel_for(g.c, 3 * g.count(), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if constexpr (kHalf<T>) {
        if (half_planes<T>(g)) {
          forward_half_channel<T, S>(a, g, c);
          continue;
        }
      }
      const ChannelPlanes<T> xs(x, g, c, kSlotX, train ? 3 : 1);  // eval: only the normalising pass
      double mean, invstd;
      const Acc* whole = xs.widened();
      if (train) {
        // Pass 1 sums in double: a plane of large values summed in fp32 would shift the mean.
        double sum = 0;
        if (whole) {
          sum = sum_double(whole, g.count());
        } else {
          for (int64_t n = 0; n < g.n; ++n) {
            xs.prefetch(n + 1);
            sum += sum_double(xs.plane(n), g.hw);
          }
        }
        mean = sum / static_cast<double>(g.count());
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
        invstd = train_statistics<S>(a, g, c, mean, sq);
      } else {
        eval_statistics<S>(a, c, mean, invstd);
      }
      const NormCoef<Acc> k = norm_coef<Acc, S>(a, g, c, mean, invstd);
      if (whole) {  // the channel at once, then rounded plane by plane
        Acc* buf = thread_scratch<Acc>(kSlotY, g.count());
        normalize<T>(whole, buf, g.count(), k, relu);
        if (gelu) gelu_in_place<T>(buf, g.count());
        store_channel(buf, y, g, c);
        continue;
      }
      for (int64_t n = 0; n < g.n; ++n) {
        const int64_t off = (n * g.c + c) * g.hw;
        if (n + 1 < g.n) prefetch_values<1>(y + off + g.c * g.hw, g.hw);
        Acc* buf;  // y itself in fp32 / fp64
        if constexpr (std::is_same_v<T, Acc>) buf = y + off; else buf = thread_scratch<Acc>(kSlotY, g.hw);
        normalize<T>(xs.plane(n), buf, g.hw, k, relu);
        if (gelu) gelu_in_place<T>(buf, g.hw);
        if constexpr (!std::is_same_v<T, Acc>) convert_n(buf, y + off, g.hw);
      }
    }
  });
}

}  // namespace

void CpuKernels::batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_forward";
  dispatch_bn(args.input.dtype, op, [&](auto t, auto st) { forward<decltype(t), decltype(st)>(args, g); });
}

}  // namespace demi::backend::cpu

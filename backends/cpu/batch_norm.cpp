// CpuKernels::batch_norm_*: per-channel normalisation of [N, C] or [N, C, H, W], one channel per
// task. Statistics are fp32 (fp64 for fp64 input, for gradcheck), summed plane by plane into double
// and formed in two passes (mean, then squared deviations) so that a large mean does not cancel.
// Half planes (bf16, fp16) of kGatheredPlane values or more are read and written as half values by
// the ISA level's passes (isa::BatchNormHalf); smaller ones are widened into fp32 buffers
// (ChannelPlanes).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/gelu.h"
#include "backends/cpu/isa/isa.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

enum Slot { kSlotX = 0, kSlotG = 1, kSlotY = 2, kSlotMasked = 3 };

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

// Asks for the n values at p ahead of reading them (kWrite 0) or writing them (1). A channel of
// NCHW is walked plane by plane, each plane a whole image after the last and on a page the hardware
// prefetcher has not seen (a 32x32 fp32 plane is one page). Asked for ahead, SmallCNN's fp32 batch
// norms ran 10-15% faster (the reads of the first pass) and AirNet's 20-25% (the writes, most of it
// on the 7x7 and 3x3 planes), forward and backward (bench_train_step --profile).
template <int kWrite, typename T>
void prefetch_values(const T* p, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(T)); b += 64) __builtin_prefetch(bytes + b, kWrite);
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
  // Asks for plane n (if any) ahead of its read, in the first pass over the channel.
  void prefetch(int64_t n) const {
    if (!widened_ && n < g_.n) prefetch_values<0>(x_ + (n * g_.c + c_) * g_.hw, g_.hw);
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
  if (g.hw == 0) return;  // H or W of 0: nothing to store (and `ahead` would divide by zero)
  const int64_t ahead = 1 + 1024 / (g.hw * static_cast<int64_t>(sizeof(T)));  // planes about 1 KiB ahead
  for (int64_t n = 0; n < g.n; ++n) {
    if (n + ahead < g.n) prefetch_values<1>(out + ((n + ahead) * g.c + c) * g.hw, g.hw);
    convert_n(buf + n * g.hw, out + (n * g.c + c) * g.hw, g.hw);
  }
}

// What normalises a channel: y = ((x - hi) - lo) * scale + shift, with the mean as hi + lo (hi =
// the mean rounded to Acc): x - hi is exact for x near the mean, so a large mean (say 1000 over a
// spread of 1) costs no accuracy in fp32.
template <typename Acc>
struct NormCoef {
  Acc hi, lo, scale, shift;
};

// The largest y that rounds to zero in T (round to nearest even, subnormals kept): y in
// [-band, band] stores as a signed zero. A separate ReLU on the stored T value zeroes negatives
// but keeps -0 and NaN, and passes the gradient where the stored value is > 0; on y in Acc that is
// "y < -band -> 0" forward and "y > band" backward.
template <typename T>
constexpr acc_t<T> relu_zero_band() {
  if constexpr (std::is_same_v<T, Eigen::half>) {
    return 0x1p-25f;  // half the smallest fp16 subnormal
  } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    return 0x1p-134f;  // half the smallest bf16 subnormal
  } else {
    static_assert(std::is_same_v<T, acc_t<T>>, "a half type without its band");
    return acc_t<T>(0);
  }
}

// y of one value; ReluMask evaluates it too, and must get the same bits.
template <typename Acc>
Acc normalized(Acc x, const NormCoef<Acc>& k) {
  return ((x - k.hi) - k.lo) * k.scale + k.shift;
}

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

// Half planes (bf16, fp16) of at least kGatheredPlane values are read and written in place by the
// ISA level's BatchNormHalf passes (isa.h), which widen and round in registers: three passes over
// a channel's half values forward (sum, squared deviations, normalise), two backward. Smaller
// planes take the widened channel above.
template <typename T>
constexpr bool kHalf = std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>;
template <typename T>
bool half_planes(const BnGeom& g) {
  return kHalf<T> && g.hw >= ChannelPlanes<T>::kGatheredPlane;
}
template <typename T>
const isa::BatchNormHalf& half_passes() {
  return std::is_same_v<T, Eigen::bfloat16> ? isa::active().batch_norm_bf16 : isa::active().batch_norm_f16;
}
inline isa::BnNorm bn_norm(const NormCoef<float>& k) { return {k.hi, k.lo, k.scale, k.shift}; }

// Plane n of channel c of an NCHW half tensor, as bits.
template <typename Bits>
Bits* half_plane(Bits* t, const BnGeom& g, int64_t n, int64_t c) {
  return t + (n * g.c + c) * g.hw;
}
template <typename T>
const uint16_t* bits_of(const TensorRef& t) {
  return reinterpret_cast<const uint16_t*>(t.as<T>());
}
template <typename T>
uint16_t* mutable_bits_of(const TensorRef& t) {
  return reinterpret_cast<uint16_t*>(t.as<T>());
}

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

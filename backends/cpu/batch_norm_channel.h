// What batch_norm.cpp (the forward) and batch_norm_backward.cpp share: a channel's planes as the
// type arithmetic is done in, their sums and stores, the half planes the ISA level's passes take,
// and a channel's normalisation y = ((x - hi) - lo) * scale + shift, which the backward of a fused
// activation recomputes from x bit for bit: both files are built without contraction
// (backends/CMakeLists.txt).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/isa/isa.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu::batch_norm_channel {

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

}  // namespace demi::backend::cpu::batch_norm_channel

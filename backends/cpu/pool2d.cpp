// CpuKernels::pool2d_*: max and average pooling over NCHW planes, one plane per task. Max records
// the argmax as an offset inside its window; backward scatters into a zeroed grad_x, summing where
// windows overlap (in fp32 for half types, rounded once at the end). The 2x2 stride-2 max pool
// works on the values' bits and its backward writes each element of grad_x once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

enum Slot { kSlotPlane = 0, kSlotWidened = 1, kSlotRowBest = 2, kSlotRowArg = 3 };

// Max over one window clipped at the plane's border; NaN wins, as in PyTorch, so a NaN input is
// not silently dropped.
template <typename Acc>
void max_window(const Acc* x, const PoolGeom& g, int64_t y0, int64_t x0, Acc& best, int64_t& arg) {
  best = -std::numeric_limits<Acc>::infinity();
  arg = -1;
  bool nan = false;
  for (int64_t ky = std::max<int64_t>(0, -y0); ky < std::min(g.kh, g.h - y0) && !nan; ++ky) {
    for (int64_t kx = std::max<int64_t>(0, -x0); kx < std::min(g.kw, g.w - x0) && !nan; ++kx) {
      const Acc v = x[(y0 + ky) * g.w + x0 + kx];
      if (arg < 0 || v > best || std::isnan(v)) {
        best = v;
        arg = ky * g.kw + kx;
        nan = std::isnan(v);
      }
    }
  }
}

// A half plane is widened once (a value sits in up to 4 windows of a 3x3 stride-2 pool). The
// windows wholly inside the plane take the row's taps one at a time across the row, selects the
// compiler vectorises: the same choice as max_window (the first maximum, or the first NaN), where
// a branch per value mispredicted half the time on real data (CCT's 3x3 stride-2 pool of
// [128, 256, 32, 32] bf16: 140 ms a step on AMX).
template <typename T, typename I>
void max_forward(const T* x_in, T* y, I* idx, const PoolGeom& g) {
  using Acc = acc_t<T>;
  const Acc* x = nullptr;
  if constexpr (std::is_same_v<T, Acc>) {
    x = x_in;
  } else {
    Acc* widened = thread_scratch<Acc>(kSlotWidened, g.h * g.w);
    convert_n(x_in, widened, g.h * g.w);
    x = widened;
  }
  Acc* best = thread_scratch<Acc>(kSlotRowBest, g.ow);
  int32_t* arg = thread_scratch<int32_t>(kSlotRowArg, g.ow);
  // Outputs [lo, hi) of a row whose window rows are inside have their columns inside too.
  const int64_t lo = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
  const int64_t hi = std::max(lo, std::min(g.ow, g.w - g.kw + g.pw >= 0 ? (g.w - g.kw + g.pw) / g.sw + 1 : 0));
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t y0 = oy * g.sh - g.ph;
    const bool rows_inside = y0 >= 0 && y0 + g.kh <= g.h;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      if (rows_inside && ox >= lo && ox < hi) continue;
      Acc v;
      int64_t a;
      max_window(x, g, y0, ox * g.sw - g.pw, v, a);
      y[oy * g.ow + ox] = static_cast<T>(v);
      idx[oy * g.ow + ox] = static_cast<I>(a);
    }
    if (!rows_inside || lo >= hi) continue;
    for (int64_t k = 0; k < g.kh * g.kw; ++k) {
      const Acc* src = x + (y0 + k / g.kw) * g.w + k % g.kw - g.pw;
      const int64_t sw = g.sw;
      const int32_t tap = static_cast<int32_t>(k);
      if (k == 0) {
        for (int64_t ox = lo; ox < hi; ++ox) best[ox] = src[ox * sw], arg[ox] = 0;
        continue;
      }
      for (int64_t ox = lo; ox < hi; ++ox) {
        const Acc v = src[ox * sw], b = best[ox];
        const bool take = (v > b) | ((v != v) & (b == b));
        best[ox] = take ? v : b;
        arg[ox] = take ? tap : arg[ox];
      }
    }
    for (int64_t ox = lo; ox < hi; ++ox) {
      y[oy * g.ow + ox] = static_cast<T>(best[ox]);
      idx[oy * g.ow + ox] = static_cast<I>(arg[ox]);
    }
  }
}

// The 2x2 stride-2 unpadded window (every max-pool in SmallCNN and AirNet) works on the values'
// bits, fp32 as well as the half types: a max is one of its inputs and its gradient is a copy, so
// neither needs arithmetic, and integer lanes let the compiler vectorise the whole loop. On
// SmallCNN's pools this is 1.3-2x faster forward and backward, fp32 and bf16, than de-interleaving
// blocks into fp32 and scattering into a zeroed plane (bench_kernels BM_MaxPool).
// Each row pair is read as words of two values, which splits a window's left and right values
// with shifts instead of strided loads.
template <typename T>
struct Bits2x2 {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "fp64 takes the generic loops");
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;  // one value
  using W = std::conditional_t<sizeof(T) == 4, uint64_t, uint32_t>;  // two neighbours
  static constexpr int kShift = 8 * sizeof(T);
  static constexpr U kSign = U(U(1) << (kShift - 1));
  // Keys as wide as the values: a half type's fit in 16 bits (-0x7fff .. 0x7fff), so its loop runs
  // twice as many lanes a vector as with 32-bit keys.
  using K = std::conditional_t<sizeof(T) == 4, int32_t, int16_t>;
  static constexpr K kInf = sizeof(T) == 4 ? K(0x7f800000) : K(kHalfInfBits<T>);
  static constexpr K kNanKey = sizeof(T) == 4 ? K(0x7fffffff) : K(0x7fff);

  // An integer that orders like the value: -magnitude for negatives (so -0 == +0, as comparing
  // the floats does), every NaN above +inf (so the first NaN wins and is never replaced).
  static K key(U bits) {
    const K magnitude = static_cast<K>(bits & U(kSign - 1));
    const K signed_key = (bits & kSign) ? K(-magnitude) : magnitude;
    return magnitude > kInf ? kNanKey : signed_key;
  }
  static W load(const U* p) {
    W w;
    std::memcpy(&w, p, sizeof(W));
    return w;
  }
  static void store(U* p, W w) { std::memcpy(p, &w, sizeof(W)); }
};

// n windows whose top and bottom pairs are consecutive in top and bottom: the same choice as
// max_forward (the first maximum in row-major window order, or the first NaN).
template <typename T, typename I>
void max_2x2_run(const typename Bits2x2<T>::U* top, const typename Bits2x2<T>::U* bottom,
                 typename Bits2x2<T>::U* y, I* idx, int64_t n) {
  using B = Bits2x2<T>;
  using U = typename B::U;
  for (int64_t o = 0; o < n; ++o) {
    const auto t = B::load(top + 2 * o), b = B::load(bottom + 2 * o);
    const U v[4] = {U(t), U(t >> B::kShift), U(b), U(b >> B::kShift)};
    typename B::K best = B::key(v[0]);
    U bits = v[0];
    typename B::K arg = 0;
    for (int k = 1; k < 4; ++k) {
      const typename B::K key = B::key(v[k]);
      const bool take = key > best;
      best = take ? key : best;
      bits = take ? v[k] : bits;
      arg = take ? k : arg;
    }
    y[o] = bits;
    idx[o] = static_cast<I>(arg);
  }
}

// The gradients of n such windows written into their pairs: the window's gradient where its index
// points, +0 elsewhere (a -0 gradient becomes +0, as 0 + -0 does in the generic scatter). Returns
// non-zero when an index is 4 or more.
template <typename T, typename I>
uint64_t max_2x2_backward_run(const typename Bits2x2<T>::U* gy, const I* idx, typename Bits2x2<T>::U* top,
                              typename Bits2x2<T>::U* bottom, int64_t n) {
  using B = Bits2x2<T>;
  using U = typename B::U;
  using W = typename B::W;
  // The index as wide as the values when it is a byte (the lanes stay the values' width), else
  // 64 bits, so that no index outside [0, 4) wraps into it.
  using Index = std::conditional_t<sizeof(I) == 1, U, uint64_t>;
  Index bad = 0;
  for (int64_t o = 0; o < n; ++o) {
    // Masks rather than selects: GCC vectorises this form only.
    const U v = gy[o] & U(-U(gy[o] != B::kSign));
    const auto k = static_cast<Index>(idx[o]);
    bad |= k >> 2;
    B::store(top + 2 * o, W(v & U(-U(k == 0))) | (W(v & U(-U(k == 1))) << B::kShift));
    B::store(bottom + 2 * o, W(v & U(-U(k == 2))) | (W(v & U(-U(k == 3))) << B::kShift));
  }
  return bad;
}

// Output rows of at least kRunMin windows run in place; shorter ones (SmallCNN's 8- and 4-wide
// outputs, AirNet's 7- and 3-wide) are gathered kRun windows at a time into contiguous pairs first,
// so the vector loop does not stop at every row end. The kernels take `planes` consecutive planes
// at once and count output rows across them: with an odd height (AirNet's 31, 15 and 7) a row
// between two planes is in no window, and taken plane by plane AirNet's 32768 planes of 7x7 and
// 3x3 outputs ran at 3-10 GB/s, their time in per-plane calls.
constexpr int64_t kRunMin = 32, kRun = 256;

// How many of the `remaining` planes a call takes: all when the height is even (the planes are one
// tall plane) or a plane fills at most half a run; else one (AirNet's 31x31 -> 15x15 ran 10-15%
// slower forward in runs that cross planes than in one run a plane).
int64_t planes_at_once(const PoolGeom& g, int64_t remaining) {
  return g.h % 2 == 0 || 2 * g.oh * g.ow <= kRun ? remaining : 1;
}

// Walks output rows across planes: at() is the offset in x (or grad_x) of the current row's top
// input row. (Computing it from the row's index took a division per row: 5-20% of a pool.)
class RowPairs {
 public:
  explicit RowPairs(const PoolGeom& g) : oh_(g.oh), w_(g.w), plane_(g.h * g.w) {}
  int64_t at() const { return base_ + 2 * oy_ * w_; }
  bool last_of_plane() const { return oy_ == oh_ - 1; }
  void next() {
    if (++oy_ == oh_) oy_ = 0, base_ += plane_;
  }

 private:
  int64_t oh_, w_, plane_, oy_ = 0, base_ = 0;
};

template <typename T, typename I>
void max_forward_2x2(const T* x_in, T* y_out, I* idx, const PoolGeom& g, int64_t planes) {
  using B = Bits2x2<T>;
  using U = typename B::U;
  const U* x = reinterpret_cast<const U*>(x_in);
  U* y = reinterpret_cast<U*>(y_out);
  const int64_t w = g.w, ow = g.ow, out_rows = planes * g.oh;
  RowPairs pairs(g);
  if (ow >= kRunMin) {
    for (int64_t r = 0; r < out_rows; ++r, pairs.next()) {
      max_2x2_run<T>(x + pairs.at(), x + pairs.at() + w, y + r * ow, idx + r * ow, ow);
    }
    return;
  }
  alignas(64) U top[2 * kRun], bottom[2 * kRun];
  const int64_t rows = kRun / ow;
  for (int64_t r0 = 0; r0 < out_rows; r0 += rows) {
    const int64_t nr = std::min(rows, out_rows - r0);
    for (int64_t r = 0; r < nr; ++r, pairs.next()) {
      const U* row = x + pairs.at();
      copy_short(row, 2 * ow, top + 2 * r * ow);
      copy_short(row + w, 2 * ow, bottom + 2 * r * ow);
    }
    max_2x2_run<T>(top, bottom, y + r0 * ow, idx + r0 * ow, nr * ow);
  }
}

// grad_x of the 2x2 stride-2 window over `planes` planes: every element written once; the row and
// column an odd size leaves out of every window are zeroed. Returns the flat output position of
// the first index outside [0, 4), or -1.
template <typename T, typename I>
int64_t max_backward_2x2(const T* gy_in, const I* idx, T* gx_out, const PoolGeom& g, int64_t planes) {
  using B = Bits2x2<T>;
  using U = typename B::U;
  const U* gy = reinterpret_cast<const U*>(gy_in);
  U* gx = reinterpret_cast<U*>(gx_out);
  const int64_t w = g.w, ow = g.ow, oh = g.oh, out_rows = planes * oh;
  RowPairs pairs(g);
  // Zeroes what an odd size leaves out of row pair `row` (its last column) and, after the plane's
  // last pair, the row below: while the plane is still in cache.
  const bool odd = w > 2 * ow || g.h > 2 * oh;
  auto finish = [&](U* row) {
    if (!odd) return;
    if (w > 2 * ow) row[w - 1] = row[2 * w - 1] = U(0);
    if (pairs.last_of_plane()) std::fill(row + 2 * w, row + (g.h - 2 * (oh - 1)) * w, U(0));
  };
  uint64_t bad = 0;
  if (ow >= kRunMin) {
    for (int64_t r = 0; r < out_rows; ++r, pairs.next()) {
      bad |= max_2x2_backward_run<T>(gy + r * ow, idx + r * ow, gx + pairs.at(), gx + pairs.at() + w, ow);
      finish(gx + pairs.at());
    }
  } else {
    alignas(64) U top[2 * kRun], bottom[2 * kRun];
    const int64_t rows = kRun / ow;
    for (int64_t r0 = 0; r0 < out_rows; r0 += rows) {
      const int64_t nr = std::min(rows, out_rows - r0);
      bad |= max_2x2_backward_run<T>(gy + r0 * ow, idx + r0 * ow, top, bottom, nr * ow);
      for (int64_t r = 0; r < nr; ++r, pairs.next()) {
        U* row = gx + pairs.at();
        copy_short(top + 2 * r * ow, 2 * ow, row);
        copy_short(bottom + 2 * r * ow, 2 * ow, row + w);
        finish(row);
      }
    }
  }
  if (bad == 0) return -1;
  for (int64_t o = 0; o < out_rows * ow; ++o) {
    if (static_cast<uint64_t>(idx[o]) > 3) return o;
  }
  return -1;
}

// Average with the padding counted in the divisor (count_include_pad=True).
template <typename T>
void avg_forward(const T* x, T* y, const PoolGeom& g) {
  using Acc = acc_t<T>;
  const Acc inv = Acc(1) / static_cast<Acc>(g.kh * g.kw);
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
      Acc sum = 0;
      for (int64_t iy = std::max<int64_t>(0, y0); iy < std::min(y0 + g.kh, g.h); ++iy) {
        for (int64_t ix = std::max<int64_t>(0, x0); ix < std::min(x0 + g.kw, g.w); ++ix) {
          sum += static_cast<Acc>(x[iy * g.w + ix]);
        }
      }
      y[oy * g.ow + ox] = static_cast<T>(sum * inv);
    }
  }
}

// Returns the flat output position of the first index that does not point inside the input (a
// corrupt or foreign indices tensor), or -1; the caller throws outside the parallel region.
template <typename I, typename Acc, typename T>
int64_t max_backward(const T* gy, const I* idx, Acc* gx, const PoolGeom& g) {
  const int64_t window = g.kh * g.kw;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t k = static_cast<int64_t>(idx[oy * g.ow + ox]);
      const int64_t iy = oy * g.sh - g.ph + k / g.kw, ix = ox * g.sw - g.pw + k % g.kw;
      if (k < 0 || k >= window || iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return oy * g.ow + ox;
      gx[iy * g.w + ix] += static_cast<Acc>(gy[oy * g.ow + ox]);
    }
  }
  return -1;
}

template <typename Acc, typename T>
void avg_backward(const T* gy, Acc* gx, const PoolGeom& g) {
  const Acc inv = Acc(1) / static_cast<Acc>(g.kh * g.kw);
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
      const Acc v = static_cast<Acc>(gy[oy * g.ow + ox]) * inv;
      for (int64_t iy = std::max<int64_t>(0, y0); iy < std::min(y0 + g.kh, g.h); ++iy) {
        for (int64_t ix = std::max<int64_t>(0, x0); ix < std::min(x0 + g.kw, g.w); ++ix) gx[iy * g.w + ix] += v;
      }
    }
  }
}

// Whether the window is 2x2 with stride 2 and no padding (max_forward_2x2, max_backward_2x2).
bool two_by_two(const PoolGeom& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
}

// Calls fn(I{}) with the indices' element type.
template <typename Fn>
void dispatch_indices(DType dtype, Fn&& fn) {
  if (dtype == DType::U8) {
    fn(uint8_t{});
  } else {
    fn(int64_t{});
  }
}

}  // namespace

void CpuKernels::pool2d_forward_impl(const Pool2dArgs& args, const PoolGeom& g) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  dispatch_floating(args.input.dtype, "pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* x = args.input.as<T>();
    T* y = args.output.as<T>();
    if (args.kind == PoolKind::Avg) {
      parallel_for(g.planes, in_plane + out_plane * g.kh * g.kw, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) avg_forward(x + p * in_plane, y + p * out_plane, g);
      });
      return;
    }
    dispatch_indices(args.indices.dtype, [&](auto itag) {
      using I = decltype(itag);
      I* idx = args.indices.as<I>();
      parallel_for(g.planes, in_plane + out_plane * g.kh * g.kw, [&](int64_t begin, int64_t end) {
        if constexpr (sizeof(T) <= 4) {
          if (two_by_two(g)) {
            for (int64_t p = begin, k; p < end; p += k) {
              k = planes_at_once(g, end - p);
              max_forward_2x2(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g, k);
            }
            return;
          }
        }
        for (int64_t p = begin; p < end; ++p) max_forward(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g);
      });
    });
  });
}

void CpuKernels::pool2d_backward_impl(const Pool2dArgs& args, const PoolGeom& g) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  dispatch_floating(args.input.dtype, "pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* gy = args.output.as<T>();
    T* gx = args.input.as<T>();
    // Overlapping windows add several gradients into one element: sum a half plane in fp32 and
    // round once, rather than rounding after every addition.
    auto plane = [&](int64_t p, auto&& scatter) {
      if constexpr (std::is_same_v<T, Acc>) {
        std::fill(gx + p * in_plane, gx + (p + 1) * in_plane, T(0));
        scatter(gx + p * in_plane);
      } else {
        Acc* acc = thread_scratch<Acc>(kSlotPlane, in_plane);
        std::fill(acc, acc + in_plane, Acc(0));
        scatter(acc);
        convert_n(acc, gx + p * in_plane, in_plane);
      }
    };
    const int64_t cost = in_plane + out_plane * (args.kind == PoolKind::Avg ? g.kh * g.kw : 1);
    if (args.kind == PoolKind::Avg) {
      parallel_for(g.planes, cost, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          plane(p, [&](Acc* dst) { avg_backward(gy + p * out_plane, dst, g); });
        }
      });
      return;
    }
    std::atomic<int64_t> bad{-1};  // flat position in the output of a bad index
    dispatch_indices(args.indices.dtype, [&](auto itag) {
      using I = decltype(itag);
      const I* idx = args.indices.as<I>();
      parallel_for(g.planes, cost, [&](int64_t begin, int64_t end) {
        if constexpr (sizeof(T) <= 4) {
          if (two_by_two(g)) {
            for (int64_t p = begin, k; p < end; p += k) {
              k = planes_at_once(g, end - p);
              const int64_t at = max_backward_2x2(gy + p * out_plane, idx + p * out_plane, gx + p * in_plane, g, k);
              if (at >= 0) bad.store(p * out_plane + at);
            }
            return;
          }
        }
        for (int64_t p = begin; p < end; ++p) {
          plane(p, [&](Acc* dst) {
            const int64_t at = max_backward(gy + p * out_plane, idx + p * out_plane, dst, g);
            if (at >= 0) bad.store(p * out_plane + at);
          });
        }
      });
    });
    const int64_t at = bad.load();
    if (at >= 0) {
      int64_t k = 0;
      dispatch_indices(args.indices.dtype, [&](auto itag) { k = static_cast<int64_t>(args.indices.as<decltype(itag)>()[at]); });
      DEMI_THROW("pool2d_backward: index ", k, " at output element ", at, " does not point inside its ", g.kh, "x",
                 g.kw, " window of the input ", args.input.shape,
                 "; pass the indices that pool2d_forward wrote for this input");
    }
  });
}

}  // namespace demi::backend::cpu

// CpuKernels::pool2d_*: max and average pooling over NCHW planes, one plane per task. Max records
// the argmax as an offset inside its window; backward scatters into a zeroed grad_x, summing where
// windows overlap (in fp32 for half types, rounded once at the end).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

enum Slot { kSlotPlane = 0 };

// Max over each window; NaN wins, as in PyTorch, so a NaN input is not silently dropped.
template <typename T, typename I>
void max_forward(const T* x, T* y, I* idx, const PoolGeom& g) {
  using Acc = acc_t<T>;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
      Acc best = -std::numeric_limits<Acc>::infinity();
      int64_t arg = -1;
      bool nan = false;
      for (int64_t ky = std::max<int64_t>(0, -y0); ky < std::min(g.kh, g.h - y0) && !nan; ++ky) {
        for (int64_t kx = std::max<int64_t>(0, -x0); kx < std::min(g.kw, g.w - x0) && !nan; ++kx) {
          const Acc v = static_cast<Acc>(x[(y0 + ky) * g.w + x0 + kx]);
          if (arg < 0 || v > best || std::isnan(v)) {
            best = v;
            arg = ky * g.kw + kx;
            nan = std::isnan(v);
          }
        }
      }
      y[oy * g.ow + ox] = static_cast<T>(best);
      idx[oy * g.ow + ox] = static_cast<I>(arg);
    }
  }
}

// Half values travel as their bits where a kernel only picks or copies them: a max is one of its
// inputs, so it needs no rounding back (Eigen's float -> bfloat16 rounds element by element).
template <typename T>
using Bits = std::conditional_t<std::is_same_v<T, acc_t<T>>, T, uint16_t>;

// The 2x2 stride-2 unpadded window (every max-pool in SmallCNN and AirNet): the same choice as
// max_forward (the first maximum, or the first NaN). Blocks of outputs are de-interleaved into
// four arrays first so that the comparisons run as plain elementwise loops the compiler
// vectorises (half blocks widened by the ISA level's conversions); the generic loop above runs at
// ~2 GB/s on these shapes.
template <typename T, typename I>
void max_forward_2x2(const T* x_in, T* y_out, I* idx, const PoolGeom& g) {
  using Acc = acc_t<T>;
  using B = Bits<T>;
  constexpr bool half = !std::is_same_v<B, T>;
  constexpr int64_t kBlock = 64;
  const B* x = reinterpret_cast<const B*>(x_in);
  B* y = reinterpret_cast<B*>(y_out);
  alignas(64) Acc v[4][kBlock];
  alignas(64) B raw[half ? 4 : 1][kBlock];  // the half blocks' bits, before widening into v
  alignas(64) Acc best[kBlock];
  alignas(64) int32_t arg[kBlock];
  // A block is `rows` output rows of `cols` outputs each: several whole rows when they are short.
  const int64_t cols = std::min(kBlock, g.ow), rows = kBlock / cols;
  for (int64_t oy0 = 0; oy0 < g.oh; oy0 += rows) {
    const int64_t nr = std::min(rows, g.oh - oy0);
    for (int64_t ox0 = 0; ox0 < g.ow; ox0 += cols) {
      const int64_t nc = std::min(cols, g.ow - ox0), n = nr * nc;
      for (int64_t r = 0; r < nr; ++r) {
        const B* r0 = x + 2 * (oy0 + r) * g.w + 2 * ox0;
        const B* r1 = r0 + g.w;
        auto* dst = half ? raw : reinterpret_cast<B(*)[kBlock]>(v);
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t j = r * nc + c;
          dst[0][j] = r0[2 * c], dst[1][j] = r0[2 * c + 1], dst[2][j] = r1[2 * c], dst[3][j] = r1[2 * c + 1];
        }
      }
      if constexpr (half) {
        for (int k = 0; k < 4; ++k) convert_n(reinterpret_cast<const T*>(raw[k]), v[k], n);
      }
      for (int64_t j = 0; j < n; ++j) best[j] = v[0][j], arg[j] = 0;
      for (int k = 1; k < 4; ++k) {
        for (int64_t j = 0; j < n; ++j) {
          // A NaN best is never replaced; a NaN candidate replaces any number.
          const bool take = best[j] == best[j] && (v[k][j] > best[j] || v[k][j] != v[k][j]);
          best[j] = take ? v[k][j] : best[j];
          arg[j] = take ? k : arg[j];
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t o = (oy0 + r) * g.ow + ox0 + c, j = r * nc + c;
          y[o] = half ? raw[arg[j]][j] : B(best[j]);
          idx[o] = static_cast<I>(arg[j]);
        }
      }
    }
  }
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
        const bool two_by_two = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
        for (int64_t p = begin; p < end; ++p) {
          if (two_by_two) {
            max_forward_2x2(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g);
          } else {
            max_forward(x + p * in_plane, y + p * out_plane, idx + p * out_plane, g);
          }
        }
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

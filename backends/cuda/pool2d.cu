// CudaKernels::pool2d_*: max and average pooling over NCHW or NHWC (channels_last) tensors with the
// CPU backend's semantics. Forward runs one thread per output element; backward is a gather (one
// thread per input element summing the windows that cover it, in the CPU's order): no atomics,
// deterministic, exact grad_x. Threads take elements in storage order, so in NHWC neighbouring
// threads read neighbouring channels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/deferred_checks.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;

// Extents of a pooling in the index type of its kernels: int32_t when every flat index (and one
// grid stride past it) fits, else int64_t; int64 divisions cost several times int32's.
template <typename Index>
struct PoolShape {
  Index planes, h, w, oh, ow;  // planes = N * C
  Index kh, kw, sh, sw, ph, pw;
  Index c;
};

// An element of an [N, C, rows, cols] tensor, found from its flat index in storage order: its
// row y and column x, and which plane (NCHW: plane = n * C + c, c unused; NHWC: plane = n and c).
template <typename Index>
struct Site {
  Index plane, c, y, x;
};
template <bool kNhwc, typename Index>
__host__ __device__ inline Site<Index> locate(Index i, Index channels, Index rows, Index cols) {
  if constexpr (kNhwc) {
    const Index c = i % channels, pixel = i / channels;
    const Index x = pixel % cols, r = pixel / cols;
    return {r / rows, c, r % rows, x};
  } else {
    const Index x = i % cols, r = i / cols;
    return {r / rows, Index(0), r % rows, x};
  }
}
// The flat index of (y, x) in the site's plane of an [N, C, rows, cols] tensor.
template <bool kNhwc, typename Index>
__host__ __device__ inline Index element(const Site<Index>& at, Index channels, Index rows, Index cols, Index y,
                                         Index x) {
  const Index pixel = (at.plane * rows + y) * cols + x;
  if constexpr (kNhwc) return pixel * channels + at.c;
  else return pixel;
}

// thread_index() and grid_width() in the kernels' index type, for grid-stride loops.
template <typename Index>
__device__ inline Index first_index() { return Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x); }
template <typename Index>
__device__ inline Index grid_stride() { return Index(gridDim.x) * Index(blockDim.x); }

// The per-element bodies below are __host__ __device__ so that they can be emulated on the host
// against the CPU backend (how they were checked before any GPU ran them); kernels only loop.

template <typename A>
__host__ __device__ inline A negative_infinity() {
#ifdef __CUDA_ARCH__
  return std::is_same_v<A, float> ? A(-CUDART_INF_F) : A(-CUDART_INF);
#else
  return -std::numeric_limits<A>::infinity();
#endif
}

// The first output row (or column) whose window [o * s - p, o * s - p + k) covers input row i,
// and the last; the range is empty when first > last (an input that no window reaches).
template <typename Index>
__host__ __device__ inline Index first_window(Index i, Index k, Index s, Index p) {
  const Index a = i + p - k + 1;  // o * s >= a
  return a <= 0 ? Index(0) : (a + s - 1) / s;
}
template <typename Index>
__host__ __device__ inline Index last_window(Index i, Index s, Index p, Index out) {
  const Index last = (i + p) / s;  // o * s <= i + p, and i + p >= 0
  return last < out - 1 ? last : out - 1;
}

// y[o] = max of o's window of x, idx[o] = its offset ky * KW + kx in the window: the first maximum,
// or the first NaN (a NaN wins, as in PyTorch, so a NaN input is not silently dropped).
// x [N, C, H, W], y and idx [N, C, OH, OW], all in one format.
template <bool kNhwc, typename T, typename I, typename Index>
__host__ __device__ inline void max_pool_forward_at(const T* x, T* y, I* idx, const PoolShape<Index>& g, Index o) {
  using A = acc_t<T>;
  const Site<Index> at = locate<kNhwc>(o, g.c, g.oh, g.ow);
  const Index y0 = at.y * g.sh - g.ph, x0 = at.x * g.sw - g.pw;
  const Index ky_end = g.kh < g.h - y0 ? g.kh : g.h - y0, kx_end = g.kw < g.w - x0 ? g.kw : g.w - x0;
  A best = negative_infinity<A>();
  Index arg = -1;
  bool nan = false;
  for (Index ky = y0 < 0 ? -y0 : 0; ky < ky_end && !nan; ++ky) {
    for (Index kx = x0 < 0 ? -x0 : 0; kx < kx_end && !nan; ++kx) {
      const A v = widen(x[element<kNhwc>(at, g.c, g.h, g.w, y0 + ky, x0 + kx)]);
      if (arg < 0 || v > best || v != v) {
        best = v;
        arg = ky * g.kw + kx;
        nan = v != v;
      }
    }
  }
  y[o] = Narrow<T>::from(best);
  idx[o] = static_cast<I>(arg);
}

// y[o] = sum of o's window of x / (KH * KW), padding counted; summed row by row as the CPU does.
template <bool kNhwc, typename T, typename Index>
__host__ __device__ inline void avg_pool_forward_at(const T* x, T* y, const PoolShape<Index>& g, acc_t<T> inv_window,
                                                    Index o) {
  using A = acc_t<T>;
  const Site<Index> at = locate<kNhwc>(o, g.c, g.oh, g.ow);
  const Index y0 = at.y * g.sh - g.ph, x0 = at.x * g.sw - g.pw;
  const Index iy_end = y0 + g.kh < g.h ? y0 + g.kh : g.h, ix_end = x0 + g.kw < g.w ? x0 + g.kw : g.w;
  A sum = 0;
  for (Index iy = y0 > 0 ? y0 : 0; iy < iy_end; ++iy) {
    for (Index ix = x0 > 0 ? x0 : 0; ix < ix_end; ++ix) sum += widen(x[element<kNhwc>(at, g.c, g.h, g.w, iy, ix)]);
  }
  y[o] = Narrow<T>::from(sum * inv_window);
}

// Calls visit(o, ky, kx) for every output window o of plane p that covers input element i (at
// offset ky * KW + kx inside it), in row-major output order (the CPU's scatter order): the
// gather both pooling backwards sum over. i indexes [N, C, H, W], o [N, C, OH, OW].
template <bool kNhwc, typename Index, typename Visit>
__host__ __device__ inline void for_each_covering_window(const PoolShape<Index>& g, Index i, Visit&& visit) {
  const Site<Index> at = locate<kNhwc>(i, g.c, g.h, g.w);
  const Index iy = at.y, ix = at.x;
  const Index oy_end = last_window(iy, g.sh, g.ph, g.oh), ox_end = last_window(ix, g.sw, g.pw, g.ow);
  const Index ox_begin = first_window(ix, g.kw, g.sw, g.pw);
  for (Index oy = first_window(iy, g.kh, g.sh, g.ph); oy <= oy_end; ++oy) {
    const Index ky = iy - (oy * g.sh - g.ph);
    for (Index ox = ox_begin; ox <= ox_end; ++ox) {
      visit(element<kNhwc>(at, g.c, g.oh, g.ow, oy, ox), ky, ix - (ox * g.sw - g.pw));
    }
  }
}

// grad_x[i] = sum of grad_y over the windows whose recorded argmax is input element i, so the sum
// matches the CPU's. An index that points nowhere inside its window matches no element;
// max_pool_index_ok reports it. grad_x [N, C, H, W], grad_y and idx [N, C, OH, OW].
template <bool kNhwc, typename T, typename I, typename Index>
__host__ __device__ inline void max_pool_backward_at(const T* grad_y, const I* idx, T* grad_x,
                                                     const PoolShape<Index>& g, Index i) {
  acc_t<T> sum = 0;
  for_each_covering_window<kNhwc>(g, i, [&](Index o, Index ky, Index kx) {
    // Compared in int64: an int64 index must not wrap into a valid int32 offset.
    if (static_cast<int64_t>(idx[o]) == static_cast<int64_t>(ky * g.kw + kx)) sum += widen(grad_y[o]);
  });
  grad_x[i] = Narrow<T>::from(sum);
}

// Whether idx[o] points inside both its window and the input (else a corrupt or foreign indices
// tensor, which the CPU refuses).
template <bool kNhwc, typename I, typename Index>
__host__ __device__ inline bool max_pool_index_ok(const I* idx, const PoolShape<Index>& g, Index o) {
  const int64_t k = static_cast<int64_t>(idx[o]);
  if (k < 0 || k >= static_cast<int64_t>(g.kh) * g.kw) return false;
  const Site<Index> at = locate<kNhwc>(o, g.c, g.oh, g.ow);
  const Index ox = at.x, oy = at.y;
  const int64_t iy = static_cast<int64_t>(oy) * g.sh - g.ph + k / g.kw;
  const int64_t ix = static_cast<int64_t>(ox) * g.sw - g.pw + k % g.kw;
  return iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
}

// grad_x[i] = sum of grad_y[o] / (KH * KW) over the windows o that cover input element i, each
// term rounded as the CPU's scatter rounds it, in its order.
template <bool kNhwc, typename T, typename Index>
__host__ __device__ inline void avg_pool_backward_at(const T* grad_y, T* grad_x, const PoolShape<Index>& g,
                                                     acc_t<T> inv_window, Index i) {
  acc_t<T> sum = 0;
  for_each_covering_window<kNhwc>(g, i, [&](Index o, Index, Index) { sum += mul_rn(widen(grad_y[o]), inv_window); });
  grad_x[i] = Narrow<T>::from(sum);
}

// --- Kernels: grid-stride loops over n output (forward) or input (backward) elements ------------

template <bool kNhwc, typename T, typename I, typename Index>
__global__ void max_pool_forward_kernel(const T* x, T* y, I* idx, PoolShape<Index> g, Index n) {
  for (Index o = first_index<Index>(); o < n; o += grid_stride<Index>()) max_pool_forward_at<kNhwc>(x, y, idx, g, o);
}

template <bool kNhwc, typename T, typename Index>
__global__ void avg_pool_forward_kernel(const T* x, T* y, PoolShape<Index> g, Index n, acc_t<T> inv_window) {
  for (Index o = first_index<Index>(); o < n; o += grid_stride<Index>()) {
    avg_pool_forward_at<kNhwc>(x, y, g, inv_window, o);
  }
}

template <bool kNhwc, typename T, typename I, typename Index>
__global__ void max_pool_backward_kernel(const T* grad_y, const I* idx, T* grad_x, PoolShape<Index> g, Index n) {
  for (Index i = first_index<Index>(); i < n; i += grid_stride<Index>()) {
    max_pool_backward_at<kNhwc>(grad_y, idx, grad_x, g, i);
  }
}

// *first_bad = the smallest output position whose index fails max_pool_index_ok; the host set it
// to all ones beforehand.
template <bool kNhwc, typename I, typename Index>
__global__ void max_pool_check_indices_kernel(const I* idx, PoolShape<Index> g, Index n,
                                              unsigned long long* first_bad) {
  for (Index o = first_index<Index>(); o < n; o += grid_stride<Index>()) {
    if (!max_pool_index_ok<kNhwc>(idx, g, o)) atomicMin(first_bad, static_cast<unsigned long long>(o));
  }
}

template <bool kNhwc, typename T, typename Index>
__global__ void avg_pool_backward_kernel(const T* grad_y, T* grad_x, PoolShape<Index> g, Index n, acc_t<T> inv_window) {
  for (Index i = first_index<Index>(); i < n; i += grid_stride<Index>()) {
    avg_pool_backward_at<kNhwc>(grad_y, grad_x, g, inv_window, i);
  }
}

// The checked geometry (backends/kernel_checks.h) in the kernels' index type, with the input's C.
template <typename Index>
PoolShape<Index> narrow_shape(const PoolGeom& g, int64_t channels) {
  return {Index(g.planes), Index(g.h),  Index(g.w),  Index(g.oh), Index(g.ow), Index(g.kh),
          Index(g.kw),     Index(g.sh), Index(g.sw), Index(g.ph), Index(g.pw), Index(channels)};
}


// Calls fn(Index{}) with int32_t when every flat index of input and output, plus one grid stride,
// stays below 2^31 (the stride is at most a few hundred thousand), else with int64_t.
template <typename Fn>
void dispatch_index(int64_t n_in, int64_t n_out, Fn&& fn) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (n_in < kLimit && n_out < kLimit) fn(int32_t{});
  else fn(int64_t{});
}

// Calls fn(Index{}, std::bool_constant<nhwc>{}) with dispatch_index's Index.
template <typename Fn>
void dispatch_index_and_layout(int64_t n_in, int64_t n_out, bool nhwc, Fn&& fn) {
  dispatch_index(n_in, n_out, [&](auto index_tag) {
    if (nhwc) fn(index_tag, std::true_type{});
    else fn(index_tag, std::false_type{});
  });
}

// Calls fn(I{}) with the indices' element type (the checks allow only U8 and I64).
template <typename Fn>
void dispatch_indices(DType dtype, Fn&& fn) {
  if (dtype == DType::U8) fn(uint8_t{});
  else fn(int64_t{});
}

}  // namespace

// pool2d_forward: input [N, C, H, W] -> output [N, C, OH, OW] (input's dtype) and, for max,
// indices [N, C, OH, OW] (U8 or I64), all NCHW or all NHWC. One thread per output element.
void CudaKernels::pool2d_forward_impl(const Pool2dArgs& args, const PoolGeom& g64) {
  constexpr const char* op = "pool2d_forward";
  const int64_t n_in = args.input.numel(), n_out = args.output.numel();
  dispatch_floating(args.input.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (n_out == 0) return;
    const DeviceGuard guard(index_);
    const unsigned blocks = blocks_for(n_out, kThreads);
    const T* x = args.input.as<const T>();
    T* y = args.output.as<T>();
    dispatch_index_and_layout(n_in, n_out, args.channels_last, [&](auto index_tag, auto layout) {
      using Index = decltype(index_tag);
      constexpr bool kNhwc = decltype(layout)::value;
      const PoolShape<Index> g = narrow_shape<Index>(g64, args.input.shape[1]);
      if (args.kind == PoolKind::Avg) {
        const A inv_window = A(1) / static_cast<A>(g64.kh * g64.kw);  // as the CPU computes it
        avg_pool_forward_kernel<kNhwc, T, Index><<<blocks, kThreads, 0, stream_>>>(x, y, g, Index(n_out), inv_window);
        DEMI_CUDA_LAUNCH_CHECK("avg_pool_forward_kernel");
        return;
      }
      dispatch_indices(args.indices.dtype, [&](auto itag) {
        using I = decltype(itag);
        max_pool_forward_kernel<kNhwc, T, I, Index><<<blocks, kThreads, 0, stream_>>>(x, y, args.indices.as<I>(), g,
                                                                               Index(n_out));
        DEMI_CUDA_LAUNCH_CHECK("max_pool_forward_kernel");
      });
    });
  });
}

// pool2d_backward: output (= grad_y [N, C, OH, OW]) and, for max, indices -> input (= grad_x
// [N, C, H, W]), every element written. Max pooling checks the indices on the device; a bad one is
// thrown at the next synchronisation (CudaKernels::defer_check), with the CPU's message, and the
// gather below never follows it.
void CudaKernels::pool2d_backward_impl(const Pool2dArgs& args, const PoolGeom& g64) {
  constexpr const char* op = "pool2d_backward";
  const int64_t n_in = args.input.numel(), n_out = args.output.numel();
  dispatch_floating(args.input.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (n_in == 0 && n_out == 0) return;
    const DeviceGuard guard(index_);
    const T* grad_y = args.output.as<const T>();
    T* grad_x = args.input.as<T>();
    dispatch_index_and_layout(n_in, n_out, args.channels_last, [&](auto index_tag, auto layout) {
      using Index = decltype(index_tag);
      constexpr bool kNhwc = decltype(layout)::value;
      const PoolShape<Index> g = narrow_shape<Index>(g64, args.input.shape[1]);
      if (args.kind == PoolKind::Avg) {
        if (n_in == 0) return;
        const A inv_window = A(1) / static_cast<A>(g64.kh * g64.kw);
        avg_pool_backward_kernel<kNhwc, T, Index><<<blocks_for(n_in, kThreads), kThreads, 0, stream_>>>(
            grad_y, grad_x, g, Index(n_in), inv_window);
        DEMI_CUDA_LAUNCH_CHECK("avg_pool_backward_kernel");
        return;
      }
      dispatch_indices(args.indices.dtype, [&](auto itag) {
        using I = decltype(itag);
        const I* idx = args.indices.as<const I>();
        if (n_out > 0) {
          unsigned long long* slot = defer_check([g64, shape = args.input.shape](int64_t at, int64_t k) {
            DEMI_THROW("pool2d_backward: index ", k, " at output element ", at, " does not point inside its ", g64.kh,
                       "x", g64.kw, " window of the input ", shape,
                       "; pass the indices that pool2d_forward wrote for this input");
          });
          max_pool_check_indices_kernel<kNhwc, I, Index><<<blocks_for(n_out, kThreads), kThreads, 0, stream_>>>(
              idx, g, Index(n_out), slot);
          DEMI_CUDA_LAUNCH_CHECK("max_pool_check_indices_kernel");
          capture_bad_value_kernel<I><<<1, 1, 0, stream_>>>(slot, idx);
          DEMI_CUDA_LAUNCH_CHECK("capture_bad_value_kernel");
        }
        if (n_in > 0) {
          max_pool_backward_kernel<kNhwc, T, I, Index><<<blocks_for(n_in, kThreads), kThreads, 0, stream_>>>(
              grad_y, idx, grad_x, g, Index(n_in));
          DEMI_CUDA_LAUNCH_CHECK("max_pool_backward_kernel");
        }
      });
    });
  });
}

}  // namespace demi::backend::cuda

// Layer normalisation on CUDA with the CPU backend's arithmetic (backends/cpu/layer_norm.cpp): fp32
// statistics (fp64 for fp64) from the row's mean m and the deviations x - m, whose sum c corrects
// the mean (m + c) and the variance (sum(d^2) / N - c^2), each output ((x - m) - c) rstd w + b
// rounded once. One warp per row for rows up to kWarpRow elements (several rows per block), one
// block per row for longer ones. The backward finds each row's residual c again from the saved
// mean; grad_weight and grad_bias are summed without atomics: each block of the partials kernel
// sums a fixed block of rows per column, and a second kernel adds the blocks' sums in block order,
// so the bits are the same on every run and every GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/layer_norm_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;       // a multiple of 32
constexpr int64_t kWarpRow = 1024;  // rows up to this long take one warp, longer ones a block

// The parameter gradients' row blocks: a function of the row count alone, never of the GPU.
constexpr int64_t kMaxRowBlocks = 512, kMinBlockRows = 16;
int64_t row_blocks(int64_t rows) { return std::min(kMaxRowBlocks, (rows + kMinBlockRows - 1) / kMinBlockRows); }

// What the kernels read and write; P is the parameters' storage type (T or C).
template <typename T, typename P>
struct LnPtrs {
  const T* x;
  const T* g;  // grad_output
  const P* w;  // null: no weight
  const P* b;  // null: no bias
  T* y;        // output or grad_input
  acc_t<T>* mean;
  acc_t<T>* rstd;
  acc_t<T>* residual;  // the backward's per-row correction of the saved mean
  int64_t rows, n;
};

// mean and rstd of each row, and y = ((x - m) - c) rstd w + b.
template <typename T, typename P, bool kBlockPerRow>
__global__ void layer_norm_forward_kernel(LnPtrs<T, P> p, acc_t<T> eps) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  const C inv_n = C(1) / static_cast<C>(p.n);
  // The loop condition is uniform over a row's threads, so all of them reach each reduction.
  for (int64_t row = lanes.first_row; row < p.rows; row += lanes.row_step) {
    const T* xr = p.x + row * p.n;
    C sum = 0;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) sum += widen(xr[j]);
    const C m = lanes.reduce(sum, Sum{}, C(0)) * inv_n;
    C dev = 0, dev_sq = 0;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) {
      const C d = widen(xr[j]) - m;
      dev += d;
      dev_sq += d * d;
    }
    const C c = lanes.reduce(dev, Sum{}, C(0)) * inv_n;
    const C var = lanes.reduce(dev_sq, Sum{}, C(0)) * inv_n - c * c;
    const C s = C(1) / dmath::sqrt((var > C(0) ? var : C(0)) + eps);
    if (lanes.lane == 0) {
      p.mean[row] = m + c;
      p.rstd[row] = s;
    }
    T* yr = p.y + row * p.n;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) {
      C v = ((widen(xr[j]) - m) - c) * s;
      if (p.w) v *= widen(p.w[j]);
      if (p.b) v += widen(p.b[j]);
      yr[j] = Narrow<T>::from(v);
    }
  }
}

// residual[row] = sum(x - mean[row]) / n: what the saved (rounded) mean misses, as in the forward.
template <typename T, typename P, bool kBlockPerRow>
__global__ void layer_norm_residual_kernel(LnPtrs<T, P> p) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  for (int64_t row = lanes.first_row; row < p.rows; row += lanes.row_step) {
    const T* xr = p.x + row * p.n;
    const C m = p.mean[row];
    C dev = 0;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) dev += widen(xr[j]) - m;
    dev = lanes.reduce(dev, Sum{}, C(0));
    if (lanes.lane == 0) p.residual[row] = dev / static_cast<C>(p.n);
  }
}

// grad_input = rstd ((g w - mean(g w)) - xhat mean(g w xhat)), xhat = ((x - m) - c) rstd.
template <typename T, typename P, bool kBlockPerRow>
__global__ void layer_norm_backward_input_kernel(LnPtrs<T, P> p) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  const C inv_n = C(1) / static_cast<C>(p.n);
  for (int64_t row = lanes.first_row; row < p.rows; row += lanes.row_step) {
    const T* xr = p.x + row * p.n;
    const T* gr = p.g + row * p.n;
    const C m = p.mean[row], c = p.residual[row], s = p.rstd[row];
    C sum_gw = 0, sum_gwx = 0;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) {
      const C gw = p.w ? widen(gr[j]) * widen(p.w[j]) : widen(gr[j]);
      sum_gw += gw;
      sum_gwx += gw * (((widen(xr[j]) - m) - c) * s);
    }
    const C mean_gw = lanes.reduce(sum_gw, Sum{}, C(0)) * inv_n;
    const C mean_gwx = lanes.reduce(sum_gwx, Sum{}, C(0)) * inv_n;
    T* out = p.y + row * p.n;
    for (int64_t j = lanes.lane; j < p.n; j += lanes.width) {
      const C gw = p.w ? widen(gr[j]) * widen(p.w[j]) : widen(gr[j]);
      const C xhat = ((widen(xr[j]) - m) - c) * s;
      out[j] = Narrow<T>::from(s * ((gw - mean_gw) - xhat * mean_gwx));
    }
  }
}

// Block (blockIdx.y) of rows, column i: parts[k * 2n + i] = sum of g xhat, parts[k * 2n + n + i] =
// sum of g, over the block's rows in ascending order.
template <typename T, typename P>
__global__ void layer_norm_param_partials_kernel(LnPtrs<T, P> p, int64_t blocks, acc_t<T>* parts) {
  using C = acc_t<T>;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, k = blockIdx.y;
  if (i >= p.n) return;
  C sum_gx = 0, sum_g = 0;
  for (int64_t row = k * p.rows / blocks; row < (k + 1) * p.rows / blocks; ++row) {
    const C g = widen(p.g[row * p.n + i]);
    sum_gx += g * (((widen(p.x[row * p.n + i]) - p.mean[row]) - p.residual[row]) * p.rstd[row]);
    sum_g += g;
  }
  parts[k * 2 * p.n + i] = sum_gx;
  parts[k * 2 * p.n + p.n + i] = sum_g;
}

// grad_weight[i] and grad_bias[i]: the blocks' sums added in block order, rounded once (either may
// be null).
template <typename C, typename P>
__global__ void layer_norm_param_sum_kernel(const C* parts, int64_t blocks, int64_t n, P* grad_w, P* grad_b) {
  for (int64_t i = thread_index(); i < 2 * n; i += grid_width()) {
    P* out = i < n ? grad_w : grad_b;
    if (!out) continue;
    C total = 0;
    for (int64_t k = 0; k < blocks; ++k) total += parts[k * 2 * n + i];
    out[i < n ? i : i - n] = Narrow<P>::from(total);
  }
}

// Calls fn(Tag<T>{}, Tag<P>{}): T the input's device type, P the parameters' (T, or C beside a half
// T; T when no parameter is given).
template <typename Fn>
void dispatch_layer_norm(const LayerNormArgs& a, const char* op, Fn&& fn) {
  DType params = a.input.dtype;
  for (const TensorRef* t : {&a.weight, &a.bias, &a.grad_weight, &a.grad_bias}) {
    if (t->defined()) params = t->dtype;
  }
  dispatch_floating(a.input.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, acc_t<T>>) {
      fn(tag, tag);
    } else if (params == DType::F32) {
      fn(tag, Tag<float>{});
    } else {
      fn(tag, tag);
    }
  });
}

template <typename T, typename P>
LnPtrs<T, P> pointers(const LayerNormArgs& a, const TensorRef& y) {
  using C = acc_t<T>;
  return {a.input.as<const T>(), a.grad_output.as<const T>(), a.weight.as<const P>(), a.bias.as<const P>(),
          y.as<T>(),             a.mean.as<C>(),              a.rstd.as<C>(),        nullptr,
          a.mean.numel(),        a.cols};
}

}  // namespace

// Kernels::layer_norm_* answer cols = 0 themselves.
void CudaKernels::layer_norm_forward_impl(const LayerNormArgs& args) {
  const int64_t rows = args.mean.numel();
  if (rows == 0) return;
  dispatch_layer_norm(args, "layer_norm", [&](auto t_tag, auto p_tag) {
    using T = typename decltype(t_tag)::type;
    using P = typename decltype(p_tag)::type;
    const LnPtrs<T, P> p = pointers<T, P>(args, args.output);
    const acc_t<T> eps = static_cast<acc_t<T>>(args.eps);
    const DeviceGuard guard(index_);
    if (args.cols <= kWarpRow) {
      layer_norm_forward_kernel<T, P, false><<<blocks_for(rows * 32, kThreads), kThreads, 0, stream_>>>(p, eps);
    } else {
      layer_norm_forward_kernel<T, P, true><<<blocks_for(rows * kThreads, kThreads), kThreads, 0, stream_>>>(p, eps);
    }
    DEMI_CUDA_LAUNCH_CHECK("layer_norm_forward_kernel");
  });
}

void CudaKernels::layer_norm_backward_impl(const LayerNormArgs& args) {
  const int64_t rows = args.mean.numel(), n = args.cols;
  const bool params = args.grad_weight.defined() || args.grad_bias.defined();
  dispatch_layer_norm(args, "layer_norm_backward", [&](auto t_tag, auto p_tag) {
    using T = typename decltype(t_tag)::type;
    using P = typename decltype(p_tag)::type;
    using C = acc_t<T>;
    const int64_t blocks = row_blocks(rows);
    // The blocks' partial sums (2 n each), then each row's residual.
    const size_t part_bytes = static_cast<size_t>(blocks * 2 * n) * sizeof(C);
    char* ws = static_cast<char*>(workspace(part_bytes + static_cast<size_t>(std::max<int64_t>(rows, 1)) * sizeof(C)));
    C* parts = reinterpret_cast<C*>(ws);
    LnPtrs<T, P> p = pointers<T, P>(args, args.grad_input);
    p.residual = reinterpret_cast<C*>(ws + part_bytes);
    const DeviceGuard guard(index_);
    const bool warp = n <= kWarpRow;
    const unsigned row_grid = blocks_for(rows * (warp ? 32 : kThreads), kThreads);
    if (rows > 0) {
      if (warp) layer_norm_residual_kernel<T, P, false><<<row_grid, kThreads, 0, stream_>>>(p);
      else layer_norm_residual_kernel<T, P, true><<<row_grid, kThreads, 0, stream_>>>(p);
      DEMI_CUDA_LAUNCH_CHECK("layer_norm_residual_kernel");
    }
    if (rows > 0 && args.grad_input.defined()) {
      if (warp) layer_norm_backward_input_kernel<T, P, false><<<row_grid, kThreads, 0, stream_>>>(p);
      else layer_norm_backward_input_kernel<T, P, true><<<row_grid, kThreads, 0, stream_>>>(p);
      DEMI_CUDA_LAUNCH_CHECK("layer_norm_backward_input_kernel");
    }
    if (!params) return;
    if (blocks > 0) {
      const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads), static_cast<unsigned>(blocks));
      layer_norm_param_partials_kernel<T, P><<<grid, kThreads, 0, stream_>>>(p, blocks, parts);
      DEMI_CUDA_LAUNCH_CHECK("layer_norm_param_partials_kernel");
    }
    layer_norm_param_sum_kernel<C, P><<<blocks_for(2 * n, kThreads), kThreads, 0, stream_>>>(
        parts, blocks, n, args.grad_weight.as<P>(), args.grad_bias.as<P>());
    DEMI_CUDA_LAUNCH_CHECK("layer_norm_param_sum_kernel");
  });
}

}  // namespace demi::backend::cuda

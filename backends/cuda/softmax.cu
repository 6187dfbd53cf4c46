// Softmax and log-softmax over the last dimension on CUDA, forward and backward, with the CPU
// backend's arithmetic: element math in fp32 (double for F64) with the row max subtracted, row sums
// accumulated in double, one rounding into the storage dtype. One warp per row for rows up to
// kWarpRow elements (several rows per block), one block per row for longer ones.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;       // a multiple of 32
constexpr int64_t kWarpRow = 1024;  // rows up to this long take one warp, longer ones a block

// x, y [rows, K] of T (may alias): y = softmax or log-softmax of each row.
template <typename T, bool kBlockPerRow>
__global__ void softmax_forward_kernel(SoftmaxKind kind, const T* x, T* y, int64_t rows, int64_t K) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  // The loop condition is uniform over a row's threads, so all of them reach each reduction.
  for (int64_t row = lanes.first_row; row < rows; row += lanes.row_step) {
    const T* xr = x + row * K;
    T* yr = y + row * K;
    C m = static_cast<C>(-CUDART_INF);
    for (int64_t j = lanes.lane; j < K; j += lanes.width) m = FMax{}(m, widen(xr[j]));
    m = lanes.reduce(m, FMax{}, static_cast<C>(-CUDART_INF));
    double sum = 0.0;
    for (int64_t j = lanes.lane; j < K; j += lanes.width) sum += static_cast<double>(dmath::exp(widen(xr[j]) - m));
    sum = lanes.reduce(sum, Sum{}, 0.0);
    // Each thread rewrites only the elements it read, after the row's reductions: in-place is safe.
    if (kind == SoftmaxKind::Softmax) {
      const C inv = static_cast<C>(1.0 / sum);
      for (int64_t j = lanes.lane; j < K; j += lanes.width)
        yr[j] = Narrow<T>::from(dmath::exp(widen(xr[j]) - m) * inv);
    } else {
      const C log_sum = static_cast<C>(::log(sum));
      for (int64_t j = lanes.lane; j < K; j += lanes.width) yr[j] = Narrow<T>::from((widen(xr[j]) - m) - log_sum);
    }
  }
}

// y, grad_y, grad_x [rows, K] of T (grad_x may alias either input):
//   softmax:     grad_x = y * (grad_y - sum(grad_y * y))
//   log_softmax: grad_x = grad_y - exp(y) * sum(grad_y)
template <typename T, bool kBlockPerRow>
__global__ void softmax_backward_kernel(SoftmaxKind kind, const T* y, const T* gy, T* gx, int64_t rows, int64_t K) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  const bool is_softmax = kind == SoftmaxKind::Softmax;
  for (int64_t row = lanes.first_row; row < rows; row += lanes.row_step) {
    const T* yr = y + row * K;
    const T* gyr = gy + row * K;
    T* gxr = gx + row * K;
    double sum = 0.0;
    for (int64_t j = lanes.lane; j < K; j += lanes.width)
      sum += static_cast<double>(is_softmax ? widen(gyr[j]) * widen(yr[j]) : widen(gyr[j]));
    const C total = static_cast<C>(lanes.reduce(sum, Sum{}, 0.0));
    for (int64_t j = lanes.lane; j < K; j += lanes.width) {
      const C g = widen(gyr[j]), out = widen(yr[j]);
      gxr[j] = Narrow<T>::from(is_softmax ? out * (g - total) : g - mul_rn(dmath::exp(out), total));
    }
  }
}

}  // namespace

// softmax_forward: x, y [..., K] of one floating dtype (may alias) -> y.
void CudaKernels::softmax_forward_impl(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) {
  const char* name = softmax_name(kind);
  const int64_t K = softmax_row_length(x.shape);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / K;
  dispatch_floating(x.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceGuard guard(index_);
    if (K <= kWarpRow) {
      softmax_forward_kernel<T, false><<<blocks_for(rows * 32, kThreads), kThreads, 0, stream_>>>(
          kind, x.as<const T>(), y.as<T>(), rows, K);
    } else {
      softmax_forward_kernel<T, true><<<blocks_for(rows * kThreads, kThreads), kThreads, 0, stream_>>>(
          kind, x.as<const T>(), y.as<T>(), rows, K);
    }
    DEMI_CUDA_LAUNCH_CHECK("softmax_forward_kernel");
  });
}

// softmax_backward: y, grad_y, grad_x [..., K] of one floating dtype -> grad_x.
void CudaKernels::softmax_backward_impl(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                                   const TensorRef& grad_x) {
  const char* name = softmax_name(kind);
  const int64_t K = softmax_row_length(y.shape);
  if (y.numel() == 0) return;
  const int64_t rows = y.numel() / K;
  dispatch_floating(y.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceGuard guard(index_);
    if (K <= kWarpRow) {
      softmax_backward_kernel<T, false><<<blocks_for(rows * 32, kThreads), kThreads, 0, stream_>>>(
          kind, y.as<const T>(), grad_y.as<const T>(), grad_x.as<T>(), rows, K);
    } else {
      softmax_backward_kernel<T, true><<<blocks_for(rows * kThreads, kThreads), kThreads, 0, stream_>>>(
          kind, y.as<const T>(), grad_y.as<const T>(), grad_x.as<T>(), rows, K);
    }
    DEMI_CUDA_LAUNCH_CHECK("softmax_backward_kernel");
  });
}

}  // namespace demi::backend::cuda

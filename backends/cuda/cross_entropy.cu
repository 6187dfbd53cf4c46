// Fused softmax cross-entropy with label smoothing on CUDA (mean over the batch), forward and
// backward, with the CPU backend's arithmetic: element math in fp32 (double for F64), row sums and
// the loss in double. A warp per row for up to kWarpRow classes, else a block per row; the forward's
// per-row losses are averaged by a second one-block kernel in a fixed order (no float atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/deferred_checks.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;       // a multiple of 32
constexpr int kMeanThreads = 1024;  // the one block that averages the per-row losses
constexpr int64_t kWarpRow = 1024;  // rows up to this long take one warp, longer ones a block

// Whether row n's label t is a class; if not, row n competes for the smallest bad row in *first_bad.
__device__ inline bool check_target(int64_t n, int64_t t, int64_t K, int lane, unsigned long long* first_bad) {
  if (t >= 0 && t < K) return true;
  if (lane == 0) atomicMin(first_bad, static_cast<unsigned long long>(n));
  return false;
}

// The row's max (in C) and sum of exp(x - max) (in double), as the CPU's row_stats.
template <typename T, bool kBlockPerRow>
__device__ void row_stats(const T* row, int64_t K, const RowLanes<kBlockPerRow>& lanes, acc_t<T>& max,
                          double& sum_exp) {
  using C = acc_t<T>;
  C m = static_cast<C>(-CUDART_INF);
  for (int64_t j = lanes.lane; j < K; j += lanes.width) m = FMax{}(m, widen(row[j]));
  m = lanes.reduce(m, FMax{}, static_cast<C>(-CUDART_INF));
  double s = 0.0;
  for (int64_t j = lanes.lane; j < K; j += lanes.width) s += static_cast<double>(dmath::exp(widen(row[j]) - m));
  max = m;
  sum_exp = lanes.reduce(s, Sum{}, 0.0);
}

// logits [N, K] of T, target [N] -> row_loss [N] (double):
//   (1 - s) * (lse - x[t]) + s * (lse - mean(x)),  lse = log(sum(exp(x))).
// A row whose target is not in [0, K) gets NaN and reports itself through *first_bad.
template <typename T, bool kBlockPerRow>
__global__ void cross_entropy_rows_kernel(const T* logits, const int64_t* target, int64_t N, int64_t K,
                                          double smoothing, double* row_loss, unsigned long long* first_bad) {
  const RowLanes<kBlockPerRow> lanes;
  // The loop condition and the target test are uniform over a row's threads, so all of them reach
  // each reduction.
  for (int64_t n = lanes.first_row; n < N; n += lanes.row_step) {
    const int64_t t = target[n];
    if (!check_target(n, t, K, lanes.lane, first_bad)) {
      if (lanes.lane == 0) row_loss[n] = CUDART_NAN;
      continue;
    }
    const T* row = logits + n * K;
    acc_t<T> m;
    double sum_exp;
    row_stats(row, K, lanes, m, sum_exp);
    double sum_x = 0.0;
    if (smoothing != 0.0) {
      for (int64_t j = lanes.lane; j < K; j += lanes.width) sum_x += static_cast<double>(widen(row[j]));
      sum_x = lanes.reduce(sum_x, Sum{}, 0.0);
    }
    if (lanes.lane == 0) {
      const double lse = static_cast<double>(m) + ::log(sum_exp);
      // Products rounded on their own (no FMA), as the CPU's ISO C++ arithmetic.
      double loss = __dmul_rn(1.0 - smoothing, lse - static_cast<double>(widen(row[t])));
      if (smoothing != 0.0) loss = __dadd_rn(loss, __dmul_rn(smoothing, lse - sum_x / static_cast<double>(K)));
      row_loss[n] = loss;
    }
  }
}

// row_loss [N] -> *loss = their mean (N = 0: 0 / 0 = NaN, PyTorch's mean of nothing). One block.
template <typename L>
__global__ void cross_entropy_mean_kernel(const double* row_loss, int64_t N, L* loss) {
  double total = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) total += row_loss[n];
  total = block_reduce(total, Sum{}, 0.0);
  if (threadIdx.x == 0) *loss = static_cast<L>(total / static_cast<double>(N));
}

// The value of a 0-d floating tensor of dtype `dtype`, read on the device.
__device__ inline double load_scalar(DType dtype, const void* p) {
  switch (dtype) {
    case DType::F32: return *static_cast<const float*>(p);
    case DType::F64: return *static_cast<const double*>(p);
    case DType::F16: return widen(*static_cast<const __half*>(p));
    case DType::BF16: return widen(*static_cast<const __nv_bfloat16*>(p));
    default: return CUDART_NAN;  // the host accepts floating dtypes only
  }
}

// logits [N, K] of T, target [N], grad_loss (0-d) -> grad_logits [N, K] of T (may alias logits):
//   grad_loss / N * (softmax(x) - ((1 - s) * onehot(t) + s / K)).
// A row whose target is not in [0, K) is not written and reports itself through *first_bad.
template <typename T, bool kBlockPerRow>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* target, const void* grad_loss,
                                              DType grad_loss_dtype, int64_t N, int64_t K, acc_t<T> on_target,
                                              acc_t<T> off_target, T* grad_logits, unsigned long long* first_bad) {
  using C = acc_t<T>;
  const RowLanes<kBlockPerRow> lanes;
  const C scale = static_cast<C>(load_scalar(grad_loss_dtype, grad_loss) / static_cast<double>(N));
  for (int64_t n = lanes.first_row; n < N; n += lanes.row_step) {
    const int64_t t = target[n];
    if (!check_target(n, t, K, lanes.lane, first_bad)) continue;
    const T* row = logits + n * K;
    T* grad = grad_logits + n * K;
    C m;
    double sum_exp;
    row_stats(row, K, lanes, m, sum_exp);
    const C inv = static_cast<C>(1.0 / sum_exp);
    // Each thread rewrites only the elements it read, after the row's reductions: in-place is safe.
    for (int64_t j = lanes.lane; j < K; j += lanes.width) {
      const C p = mul_rn(dmath::exp(widen(row[j]) - m), inv);  // not fused with the subtraction below
      grad[j] = Narrow<T>::from(scale * (p - (j == t ? on_target : off_target)));
    }
  }
}

// The error of a row whose target is not a class, with the CPU's message. It is thrown at the next
// synchronisation (CudaKernels::defer_check), as a device-side assert would be, so that a training
// step does not wait for its loss; the row's loss is NaN and its gradient row unwritten meanwhile.
CudaKernels::DeferredError bad_target_error(const char* op, int64_t K) {
  return [op, K](int64_t n, int64_t t) {
    DEMI_THROW(op, ": target[", n, "] = ", t, " is out of range for ", K, " classes; labels must be in [0, ", K, ")",
               t < 0 ? kNoIgnoreIndex : "");
  };
}

// Copies the first bad row's target into the check's slot while the target is still alive.
void capture_bad_target(unsigned long long* slot, const CrossEntropyArgs& args, cudaStream_t stream) {
  capture_bad_value_kernel<int64_t><<<1, 1, 0, stream>>>(slot, args.target.as<const int64_t>());
  DEMI_CUDA_LAUNCH_CHECK("capture_bad_value_kernel");
}

}  // namespace

// cross_entropy_forward: logits [N, K] (floating), target [N] (I64) -> loss (0-d, F64 for F64
// logits, else F32).
void CudaKernels::cross_entropy_forward_impl(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy";  // the labels are checked on the device
  const DType loss_dtype = cross_entropy_loss_dtype(args.logits.dtype);
  const int64_t N = args.logits.shape[0], K = args.logits.shape[1];
  const DeviceGuard guard(index_);
  double* row_loss = N > 0 ? static_cast<double*>(workspace(static_cast<size_t>(N) * sizeof(double))) : nullptr;
  unsigned long long* slot = N > 0 ? defer_check(bad_target_error(op, K)) : nullptr;
  dispatch_floating(args.logits.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (N == 0) return;
    const T* logits = args.logits.as<const T>();
    const int64_t* target = args.target.as<const int64_t>();
    if (K <= kWarpRow) {
      cross_entropy_rows_kernel<T, false><<<blocks_for(N * 32, kThreads), kThreads, 0, stream_>>>(
          logits, target, N, K, args.label_smoothing, row_loss, slot);
    } else {
      cross_entropy_rows_kernel<T, true><<<blocks_for(N * kThreads, kThreads), kThreads, 0, stream_>>>(
          logits, target, N, K, args.label_smoothing, row_loss, slot);
    }
    DEMI_CUDA_LAUNCH_CHECK("cross_entropy_rows_kernel");
  });
  if (loss_dtype == DType::F64) {
    cross_entropy_mean_kernel<double><<<1, kMeanThreads, 0, stream_>>>(row_loss, N, args.loss.as<double>());
  } else {
    cross_entropy_mean_kernel<float><<<1, kMeanThreads, 0, stream_>>>(row_loss, N, args.loss.as<float>());
  }
  DEMI_CUDA_LAUNCH_CHECK("cross_entropy_mean_kernel");
  if (N > 0) capture_bad_target(slot, args, stream_);
}

// cross_entropy_backward: logits [N, K] (floating), target [N] (I64), grad_loss (0-d, floating,
// read on the device) -> grad_logits [N, K] in logits' dtype.
void CudaKernels::cross_entropy_backward_impl(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy_backward";  // the labels are checked on the device
  dispatch_floating(args.grad_loss.dtype, op, [](auto) {});  // throws for a non-floating grad_loss
  const int64_t N = args.logits.shape[0], K = args.logits.shape[1];
  if (N == 0) return;  // with K = 0 every row's label is out of range: the kernel reports row 0
  const DeviceGuard guard(index_);
  unsigned long long* slot = defer_check(bad_target_error(op, K));
  dispatch_floating(args.logits.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    const double s = args.label_smoothing;
    const C off_target = static_cast<C>(s / static_cast<double>(K));
    const C on_target = static_cast<C>(1.0 - s + s / static_cast<double>(K));
    const T* logits = args.logits.as<const T>();
    const int64_t* target = args.target.as<const int64_t>();
    T* grad = args.grad_logits.as<T>();
    if (K <= kWarpRow) {
      cross_entropy_backward_kernel<T, false><<<blocks_for(N * 32, kThreads), kThreads, 0, stream_>>>(
          logits, target, args.grad_loss.data, args.grad_loss.dtype, N, K, on_target, off_target, grad, slot);
    } else {
      cross_entropy_backward_kernel<T, true><<<blocks_for(N * kThreads, kThreads), kThreads, 0, stream_>>>(
          logits, target, args.grad_loss.data, args.grad_loss.dtype, N, K, on_target, off_target, grad, slot);
    }
    DEMI_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel");
  });
  capture_bad_target(slot, args, stream_);
}

}  // namespace demi::backend::cuda

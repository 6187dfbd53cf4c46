// Softmax and log-softmax over the last dimension, forward and backward. Element math is fp32
// (double for F64) with the row max subtracted; row sums accumulate in double so long rows keep
// fp32 accuracy, and half outputs are rounded once.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T>
void softmax_forward_typed(SoftmaxKind kind, const T* x, T* y, int64_t rows, int64_t K) {
  using C = acc_t<T>;
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  parallel_for(rows, 10 * K, [&](int64_t b, int64_t e) {
    C* shifted = thread_scratch<C>(0, K);
    C* ex = thread_scratch<C>(1, K);
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * K;
      T* yr = y + r * K;
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t j = 0; j < K; ++j) m = std::max(m, static_cast<C>(xr[j]));
      for (int64_t j = 0; j < K; ++j) shifted[j] = static_cast<C>(xr[j]) - m;
      Eigen::Map<Array>(ex, K) = exp_to_subnormals(Eigen::Map<const Array>(shifted, K));  // exp(-inf) = 0
      double sum = 0.0;
      for (int64_t j = 0; j < K; ++j) sum += static_cast<double>(ex[j]);
      if (kind == SoftmaxKind::Softmax) {
        const C inv = static_cast<C>(1.0 / sum);
        for (int64_t j = 0; j < K; ++j) yr[j] = T(ex[j] * inv);
      } else {
        const C log_sum = static_cast<C>(std::log(sum));
        for (int64_t j = 0; j < K; ++j) yr[j] = T(shifted[j] - log_sum);
      }
    }
  });
}

// softmax:     grad_x = y * (grad_y - sum(grad_y * y))
// log_softmax: grad_x = grad_y - exp(y) * sum(grad_y)
template <typename T>
void softmax_backward_typed(SoftmaxKind kind, const T* y, const T* gy, T* gx, int64_t rows, int64_t K) {
  using C = acc_t<T>;
  parallel_for(rows, 10 * K, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* yr = y + r * K;
      const T* gyr = gy + r * K;
      T* gxr = gx + r * K;
      double sum = 0.0;
      if (kind == SoftmaxKind::Softmax) {
        for (int64_t j = 0; j < K; ++j) sum += static_cast<double>(static_cast<C>(gyr[j]) * static_cast<C>(yr[j]));
        const C dot = static_cast<C>(sum);
        for (int64_t j = 0; j < K; ++j) gxr[j] = T(static_cast<C>(yr[j]) * (static_cast<C>(gyr[j]) - dot));
      } else {
        for (int64_t j = 0; j < K; ++j) sum += static_cast<double>(static_cast<C>(gyr[j]));
        const C total = static_cast<C>(sum);
        for (int64_t j = 0; j < K; ++j)
          gxr[j] = T(static_cast<C>(gyr[j]) - std::exp(static_cast<C>(yr[j])) * total);
      }
    }
  });
}

}  // namespace

void CpuKernels::softmax_forward_impl(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) {
  const char* name = softmax_name(kind);
  const int64_t K = softmax_row_length(x.shape);
  if (x.numel() == 0) return;
  dispatch_floating(x.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_typed<T>(kind, x.as<T>(), y.as<T>(), x.numel() / K, K);
  });
}

void CpuKernels::softmax_backward_impl(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                                       const TensorRef& grad_x) {
  const char* name = softmax_name(kind);
  const int64_t K = softmax_row_length(y.shape);
  if (y.numel() == 0) return;
  dispatch_floating(y.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_typed<T>(kind, y.as<T>(), grad_y.as<T>(), grad_x.as<T>(), y.numel() / K, K);
  });
}

}  // namespace demi::backend::cpu

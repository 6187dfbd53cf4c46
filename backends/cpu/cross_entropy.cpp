// Fused softmax cross-entropy with label smoothing, mean over the batch: forward loss and backward
// grad_logits. A fused kernel (rather than log_softmax + gather) because it needs no [N, K]
// temporary and keeps the loss in fp32 whatever the logits' dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// Every label, here on the host (the entry point checked the shapes and dtypes).
void check_labels(const char* op, const CrossEntropyArgs& args) {
  const int64_t N = args.logits.shape[0], K = args.logits.shape[1];
  const int64_t* t = args.target.as<int64_t>();
  for (int64_t n = 0; n < N; ++n) {
    DEMI_CHECK(t[n] >= 0 && t[n] < K, op, ": target[", n, "] = ", t[n], " is out of range for ", K,
               " classes; labels must be in [0, ", K, ")", t[n] < 0 ? kNoIgnoreIndex : "");
  }
}

// Per row: the max and the sum of exp(x - max) (accumulated in double).
template <typename T>
void row_stats(const T* row, int64_t K, acc_t<T>& max, double& sum_exp) {
  using C = acc_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < K; ++j) m = std::max(m, static_cast<C>(row[j]));
  double s = 0.0;
  for (int64_t j = 0; j < K; ++j) s += static_cast<double>(std::exp(static_cast<C>(row[j]) - m));
  max = m;
  sum_exp = s;
}

}  // namespace

void CpuKernels::cross_entropy_forward_impl(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy";
  check_labels(op, args);
  const DType loss_dtype = cross_entropy_loss_dtype(args.logits.dtype);
  const int64_t N = args.logits.shape[0], K = args.logits.shape[1];
  const double s = args.label_smoothing;
  const int64_t* target = args.target.as<int64_t>();
  std::vector<double> row_loss(static_cast<size_t>(N));
  dispatch_floating(args.logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* logits = args.logits.as<T>();
    parallel_for(N, 4 * K, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const T* row = logits + n * K;
        acc_t<T> m;
        double sum_exp;
        row_stats(row, K, m, sum_exp);
        const double lse = static_cast<double>(m) + std::log(sum_exp);
        double loss = (1.0 - s) * (lse - static_cast<double>(static_cast<acc_t<T>>(row[target[n]])));
        if (s != 0.0) {
          double sum_x = 0.0;
          for (int64_t j = 0; j < K; ++j) sum_x += static_cast<double>(static_cast<acc_t<T>>(row[j]));
          loss += s * (lse - sum_x / static_cast<double>(K));
        }
        row_loss[n] = loss;
      }
    });
  });
  double total = 0.0;
  for (double v : row_loss) total += v;
  const double mean = total / static_cast<double>(N);  // N = 0: NaN, as PyTorch's mean of nothing
  if (loss_dtype == DType::F64) *args.loss.as<double>() = mean;
  else *args.loss.as<float>() = static_cast<float>(mean);
}

void CpuKernels::cross_entropy_backward_impl(const CrossEntropyArgs& args) {
  constexpr const char* op = "cross_entropy_backward";
  check_labels(op, args);
  double grad_loss = 0.0;
  dispatch_floating(args.grad_loss.dtype, op, [&](auto tag) {
    using G = decltype(tag);
    grad_loss = static_cast<double>(static_cast<acc_t<G>>(*args.grad_loss.as<G>()));
  });
  const int64_t N = args.logits.shape[0], K = args.logits.shape[1];
  if (N == 0 || K == 0) return;
  const int64_t* target = args.target.as<int64_t>();
  dispatch_floating(args.logits.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    using C = acc_t<T>;
    const C scale = static_cast<C>(grad_loss / static_cast<double>(N));
    const C off_target = static_cast<C>(args.label_smoothing / static_cast<double>(K));
    const C on_target = static_cast<C>(1.0 - args.label_smoothing + args.label_smoothing / static_cast<double>(K));
    const T* logits = args.logits.as<T>();
    T* grad = args.grad_logits.as<T>();
    parallel_for(N, 4 * K, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const T* row = logits + n * K;
        T* grow = grad + n * K;
        C m;
        double sum_exp;
        row_stats(row, K, m, sum_exp);
        const C inv = static_cast<C>(1.0 / sum_exp);
        for (int64_t j = 0; j < K; ++j) {
          const C p = std::exp(static_cast<C>(row[j]) - m) * inv;
          grow[j] = T(scale * (p - (j == target[n] ? on_target : off_target)));
        }
      }
    });
  });
}

}  // namespace demi::backend::cpu

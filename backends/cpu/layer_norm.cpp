// Layer normalisation on the CPU, row by row, in fp32 (fp64 for fp64) whatever the storage dtype.
// A row (a few hundred values) stays in L1 while it is read several times: the mean m, then the
// deviations d = x - m with their sum and sum of squares, whose correction c = sum(d) / N puts the
// mean at m + c and the variance at sum(d^2) / N - c^2 without the cancellation of E[x^2] - E[x]^2;
// each output is ((x - m) - c) rstd, so a large mean costs no accuracy either. The backward reads
// a row twice: its sums (c again, from the saved mean), then the gradients. Sums run in independent
// vector lanes; the parameter gradients add per-block partial sums over fixed row blocks in block
// order, so their bits do not depend on the thread count. Portable C++ at every ISA level: on CCT's
// rows (128-256 values) it keeps up with PyTorch's kernels (bench_kernels' BM_LayerNorm).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/layer_norm_checks.h"

namespace demi::backend::cpu {
namespace {

// Scratch: the calling thread's (parameters, partial sums) outside the parallel region, then each
// thread's rows inside it.
constexpr int kSlotWeight = 0, kSlotBias = 1, kSlotPartials = 2, kSlotX = 3, kSlotG = 4, kSlotOut = 5;

// The parameter gradients' row blocks: a function of the row count alone, never of the thread count.
constexpr int64_t kMaxBlocks = 128, kMinBlockRows = 8;
int64_t row_blocks(int64_t rows) { return std::min(kMaxBlocks, (rows + kMinBlockRows - 1) / kMinBlockRows); }

// Sums run in kLanes independent lanes (four AVX2 vectors: 32 floats, 16 doubles) that Eigen
// keeps in vector registers and adds up in a fixed tree: a single running sum would not vectorise,
// as its additions may not be reordered. (Plain C arrays of lanes were zeroed with `rep stos` and
// folded through memory, a hundred cycles a row; so are these, if a tail is added into a lane.)
template <typename C> constexpr int kLanes = 128 / static_cast<int>(sizeof(C));
template <typename C> using Lanes = Eigen::Array<C, kLanes<C>, 1>;
template <typename C> using LanesOf = Eigen::Map<const Lanes<C>>;

// sum(x - m).
template <typename C> C deviation_sum(const C* x, int64_t n, C m) {
  Lanes<C> d = Lanes<C>::Zero();
  int64_t i = 0;
  for (; i + kLanes<C> <= n; i += kLanes<C>) d += LanesOf<C>(x + i) - m;
  C tail = 0;
  for (; i < n; ++i) tail += x[i] - m;
  return d.sum() + tail;
}

// sum(x - m) and sum((x - m)^2).
template <typename C> void deviation_sums(const C* x, int64_t n, C m, C& sum, C& sum_sq) {
  Lanes<C> d = Lanes<C>::Zero(), q = Lanes<C>::Zero();
  int64_t i = 0;
  for (; i + kLanes<C> <= n; i += kLanes<C>) {
    const Lanes<C> dev = LanesOf<C>(x + i) - m;
    d += dev;
    q += dev * dev;
  }
  C tail_d = 0, tail_q = 0;
  for (; i < n; ++i) {
    const C dev = x[i] - m;
    tail_d += dev;
    tail_q += dev * dev;
  }
  sum = d.sum() + tail_d;
  sum_sq = q.sum() + tail_q;
}

// sum(x - m), sum(g w) and sum(g w (x - m)).
template <typename C>
void backward_sums(const C* x, const C* g, const C* w, int64_t n, C m, C& sum_d, C& sum_gw, C& sum_gwd) {
  Lanes<C> d = Lanes<C>::Zero(), a = Lanes<C>::Zero(), p = Lanes<C>::Zero();
  int64_t i = 0;
  for (; i + kLanes<C> <= n; i += kLanes<C>) {
    const Lanes<C> dev = LanesOf<C>(x + i) - m, gw = LanesOf<C>(g + i) * LanesOf<C>(w + i);
    d += dev;
    a += gw;
    p += gw * dev;
  }
  C tail_d = 0, tail_a = 0, tail_p = 0;
  for (; i < n; ++i) {
    const C dev = x[i] - m, gw = g[i] * w[i];
    tail_d += dev;
    tail_a += gw;
    tail_p += gw * dev;
  }
  sum_d = d.sum() + tail_d;
  sum_gw = a.sum() + tail_a;
  sum_gwd = p.sum() + tail_p;
}

// Row r of a T tensor as C values: in place when T is C, else widened into the thread's `slot`.
template <typename T, typename C> const C* row_as(const T* data, int64_t r, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, C>) {
    return data + r * n;
  } else {
    C* buf = thread_scratch<C>(slot, n);
    convert_n(data + r * n, buf, n);
    return buf;
  }
}

// Where row r of a T tensor is computed in C: in place when T is C, else in the thread's scratch,
// which store_row then rounds into the row.
template <typename T, typename C> C* out_row(T* data, int64_t r, int64_t n) {
  if constexpr (std::is_same_v<T, C>) return data + r * n;
  else return thread_scratch<C>(kSlotOut, n);
}
template <typename T, typename C> void store_row(const C* out, T* data, int64_t r, int64_t n) {
  if constexpr (!std::is_same_v<T, C>) convert_n(out, data + r * n, n);
}

// A weight or bias (or null) as C values: in place when it is C already, else widened into `slot`.
template <typename C> const C* param_as(const TensorRef& t, int slot) {
  if (!t.defined()) return nullptr;
  if (t.dtype == (std::is_same_v<C, double> ? DType::F64 : DType::F32)) return t.as<C>();
  C* buf = thread_scratch<C>(slot, t.numel());
  dispatch_floating(t.dtype, "layer_norm", [&](auto tag) { convert_n(t.as<decltype(tag)>(), buf, t.numel()); });
  return buf;
}

// out = ((x - m) - c) s w + b, w and b optional (restrict, as backward_row).
template <typename C>
void normalize_row(const C* __restrict x, const C* __restrict w, const C* __restrict b, int64_t n, C m, C c, C s,
                   C* __restrict out) {
  if (w && b) {
    for (int64_t i = 0; i < n; ++i) out[i] = ((x[i] - m) - c) * s * w[i] + b[i];
  } else if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = ((x[i] - m) - c) * s * w[i];
  } else if (b) {
    for (int64_t i = 0; i < n; ++i) out[i] = ((x[i] - m) - c) * s + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = ((x[i] - m) - c) * s;
  }
}

template <typename T>
void forward_typed(const LayerNormArgs& a) {
  using C = acc_t<T>;
  const int64_t rows = a.mean.numel(), n = a.cols;
  const C* w = param_as<C>(a.weight, kSlotWeight);
  const C* b = param_as<C>(a.bias, kSlotBias);
  const T* x = a.input.as<T>();
  T* y = a.output.as<T>();
  C* mean = a.mean.as<C>();
  C* rstd = a.rstd.as<C>();
  const C eps = static_cast<C>(a.eps), inv_n = C(1) / static_cast<C>(n);
  parallel_for(rows, 4 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const C* xr = row_as<T, C>(x, r, n, kSlotX);
      const C m = deviation_sum(xr, n, C(0)) * inv_n;
      C sum, sum_sq;
      deviation_sums(xr, n, m, sum, sum_sq);
      const C c = sum * inv_n;
      const C s = C(1) / std::sqrt(std::max(sum_sq * inv_n - c * c, C(0)) + eps);
      mean[r] = m + c;
      rstd[r] = s;
      C* out = out_row<T, C>(y, r, n);
      normalize_row(xr, w, b, n, m, c, s, out);
      store_row(out, y, r, n);
    }
  });
}

// One row's numbers for its second pass: xhat = ((x - m) - c) rstd, and the means of g w and
// g w xhat.
template <typename C> struct RowCoef {
  C m, c, rstd, mean_gw, mean_gwx;
};

// grad_input's row, and g xhat and g added to the block's sums. Restrict: without it GCC gives up
// vectorising, the aliasing checks of six arrays being too many.
template <typename C>
void backward_row(const C* __restrict x, const C* __restrict g, const C* __restrict w, int64_t n, RowCoef<C> k,
                  C* __restrict out, C* __restrict part_w, C* __restrict part_b) {
  for (int64_t i = 0; i < n; ++i) {
    const C xhat = ((x[i] - k.m) - k.c) * k.rstd;
    out[i] = k.rstd * ((g[i] * w[i] - k.mean_gw) - xhat * k.mean_gwx);
    part_w[i] += g[i] * xhat;
    part_b[i] += g[i];
  }
}

// What the backward's rows read and write: grad_input (null: not wanted), and the block's partial
// sums of g * xhat and of g. w is all ones when there is no weight.
template <typename T, typename C>
struct BackwardRows {
  const T *x, *g;
  const C *w, *mean, *rstd;
  T* grad_x;
  int64_t n;

  // Two passes over each row: the sums, then everything else. With d = x - m (m the saved mean) and
  // c = mean(d) its residual, xhat = (d - c) rstd, so sum(g w xhat) = rstd (sum(g w d) - c sum(g w)).
  void run(int64_t begin, int64_t end, C* part_w, C* part_b) const {
    const C inv_n = C(1) / static_cast<C>(n);
    for (int64_t r = begin; r < end; ++r) {
      const C* xr = row_as<T, C>(x, r, n, kSlotX);
      const C* gr = row_as<T, C>(g, r, n, kSlotG);
      const C m = mean[r], s = rstd[r];
      C sum_d, sum_gw, sum_gwd;
      backward_sums(xr, gr, w, n, m, sum_d, sum_gw, sum_gwd);
      const C c = sum_d * inv_n;
      const C mean_gw = sum_gw * inv_n, mean_gwx = s * (sum_gwd - c * sum_gw) * inv_n;
      C* out = grad_x ? out_row<T, C>(grad_x, r, n) : thread_scratch<C>(kSlotOut, n);
      backward_row(xr, gr, w, n, {m, c, s, mean_gw, mean_gwx}, out, part_w, part_b);
      if (grad_x) store_row(out, grad_x, r, n);
    }
  }
};

// The weight as C values, or ones without one.
template <typename C> const C* weight_or_ones(const TensorRef& weight, int64_t n) {
  if (weight.defined()) return param_as<C>(weight, kSlotWeight);
  C* ones = thread_scratch<C>(kSlotWeight, n);
  std::fill(ones, ones + n, C(1));
  return ones;
}

template <typename T>
void backward_typed(const LayerNormArgs& a) {
  using C = acc_t<T>;
  const int64_t rows = a.mean.numel(), n = a.cols;
  const BackwardRows<T, C> rows_of{a.input.as<T>(), a.grad_output.as<T>(), weight_or_ones<C>(a.weight, n),
                                   a.mean.as<C>(),  a.rstd.as<C>(),        a.grad_input.as<T>(),
                                   n};
  const int64_t blocks = row_blocks(rows);
  // Block k's sums of g * xhat at parts[2 k n, 2 k n + n), of g at [2 k n + n, 2 k n + 2 n).
  C* parts = thread_scratch<C>(kSlotPartials, blocks * 2 * n);
  parallel_for(blocks, (rows / std::max<int64_t>(blocks, 1) + 1) * 8 * n, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      C* part = parts + k * 2 * n;
      std::fill(part, part + 2 * n, C(0));
      rows_of.run(k * rows / blocks, (k + 1) * rows / blocks, part, part + n);
    }
  });
  if (!a.grad_weight.defined() && !a.grad_bias.defined()) return;
  C* total = thread_scratch<C>(kSlotOut, 2 * n);
  std::fill(total, total + 2 * n, C(0));
  for (int64_t k = 0; k < blocks; ++k) {  // in block order, whatever thread summed each block
    for (int64_t i = 0; i < 2 * n; ++i) total[i] += parts[k * 2 * n + i];
  }
  auto store = [&](const TensorRef& out, const C* v) {
    if (!out.defined()) return;
    dispatch_floating(out.dtype, "layer_norm_backward", [&](auto tag) { convert_n(v, out.as<decltype(tag)>(), n); });
  };
  store(a.grad_weight, total);
  store(a.grad_bias, total + n);
}

}  // namespace

// Kernels::layer_norm_* answer cols = 0 themselves.
void CpuKernels::layer_norm_forward_impl(const LayerNormArgs& args) {
  dispatch_floating(args.input.dtype, "layer_norm", [&](auto tag) { forward_typed<decltype(tag)>(args); });
}

void CpuKernels::layer_norm_backward_impl(const LayerNormArgs& args) {
  dispatch_floating(args.input.dtype, "layer_norm_backward", [&](auto tag) { backward_typed<decltype(tag)>(args); });
}

}  // namespace demi::backend::cpu

// Scaled dot-product attention on CUDA with the CPU backend's numerics, the scores materialised:
// cuBLASLt's batched GEMMs (through gemm(), fp32 output whatever the inputs: half products summed in
// fp32) for scale * q k^T, a row kernel for the mask, the causal cut and the softmax in fp32 (F64 for
// F64 inputs; the row maximum subtracted, logsumexp kept), and a GEMM of the fp32 probabilities with
// v widened to fp32, rounded once into out. Backward rebuilds P from the saved logsumexp, forms
// dP = dO v^T and dS = P (dP - rowsum(dO * out)) in fp32, and the three gradients by GEMMs of dS or
// P with widened operands. Under set_allow_tf32 the fp32 products take TF32 as every fp32 GEMM does.
// The scores, dP and widened copies live in a buffer of their own (attention_scratch), apart from
// workspace(), which the GEMMs take for themselves.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <type_traits>

#include "backends/attention_checks.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"

namespace demi::backend::cuda {

struct CudaKernels::AttentionScratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  ~AttentionScratch() {
    if (ptr) (void)cudaFree(ptr);  // errors ignored: this may run while the process exits
  }
};
void CudaKernels::PlansDeleter::operator()(AttentionScratch* scratch) const { delete scratch; }

void* CudaKernels::attention_scratch(size_t bytes) {
  if (!attention_scratch_) attention_scratch_.reset(new AttentionScratch);
  AttentionScratch& s = *attention_scratch_;
  if (bytes <= s.bytes) return s.ptr;
  const DeviceGuard guard(index_);
  release_buffer(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  s.ptr = raw_allocate(bytes);
  s.bytes = bytes;
  return s.ptr;
}

namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRow = 1024;  // rows up to this long take one warp, longer ones a block
constexpr int kMaxLead = 8;         // leading (batch, head) dims a mask's broadcast may span

// The mask as the kernels read it: element (b, i, j) at offset(b) + i * ml + j * ms, of `kind`.
struct MaskView {
  enum Kind { None, U8, F32, F64, F16, BF16 };
  const void* data = nullptr;
  int kind = None, rank = 0;
  int64_t lead[kMaxLead] = {}, stride[kMaxLead] = {};
  int64_t ml = 0, ms = 0;

  __device__ int64_t offset(int64_t b) const {
    int64_t at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      at += (b % lead[d]) * stride[d];
      b /= lead[d];
    }
    return at;
  }
  // The additive value at `at`: a U8 mask gives 0 (takes part) or -inf, as torch's bool mask.
  template <typename C>
  __device__ C value(int64_t at) const {
    switch (kind) {
      case U8: return static_cast<const uint8_t*>(data)[at] ? C(0) : static_cast<C>(-CUDART_INF);
      case F32: return static_cast<C>(static_cast<const float*>(data)[at]);
      case F64: return static_cast<C>(static_cast<const double*>(data)[at]);
      case F16: return static_cast<C>(widen(static_cast<const __half*>(data)[at]));
      case BF16: return static_cast<C>(widen(static_cast<const __nv_bfloat16*>(data)[at]));
      default: return C(0);
    }
  }
};

MaskView mask_view(const TensorRef& mask, const AttnGeom& g) {
  MaskView v;
  if (!g.has_mask) return v;
  DEMI_CHECK(g.lead.size() <= static_cast<size_t>(kMaxLead), "attention: the CUDA backend takes at most ", kMaxLead,
             " leading dims with a mask, got ", g.lead.size(), "; merge the leading dims first");
  v.data = mask.data;
  switch (mask.dtype) {
    case DType::U8: v.kind = MaskView::U8; break;
    case DType::F32: v.kind = MaskView::F32; break;
    case DType::F64: v.kind = MaskView::F64; break;
    case DType::F16: v.kind = MaskView::F16; break;
    default: v.kind = MaskView::BF16; break;
  }
  v.rank = static_cast<int>(g.lead.size());
  for (int d = 0; d < v.rank; ++d) v.lead[d] = g.lead[d], v.stride[d] = g.mask_lead[d];
  v.ml = g.mask_l, v.ms = g.mask_s;
  return v;
}

// The logit of score x at (row = b * L + i, key j): x plus the mask, -inf past the causal diagonal.
template <typename C>
__device__ C logit(C x, const MaskView& mask, bool causal, int64_t row, int64_t j, int64_t L) {
  const int64_t i = row % L;
  if (causal && j > i) return static_cast<C>(-CUDART_INF);
  if (mask.kind != MaskView::None) x += mask.value<C>(mask.offset(row / L) + i * mask.ml + j * mask.ms);
  return x;
}

// s [rows, S] of scaled scores -> P = softmax(logits) in place; lse[row] = max + log(sum). A row in
// which nothing takes part: P = 0 and lse = 0, as the CPU backend (and torch) give.
template <typename C, bool kBlockPerRow>
__global__ void softmax_rows_kernel(C* s, C* lse, MaskView mask, bool causal, int64_t rows, int64_t L, int64_t S) {
  const RowLanes<kBlockPerRow> lanes;
  const C neg_inf = static_cast<C>(-CUDART_INF);
  for (int64_t row = lanes.first_row; row < rows; row += lanes.row_step) {
    C* sr = s + row * S;
    C m = neg_inf;
    for (int64_t j = lanes.lane; j < S; j += lanes.width) {
      sr[j] = logit(sr[j], mask, causal, row, j, L);
      m = FMax{}(m, sr[j]);
    }
    m = lanes.reduce(m, FMax{}, neg_inf);
    const bool empty = m == neg_inf;
    C sum = 0;
    for (int64_t j = lanes.lane; j < S && !empty; j += lanes.width) sum += dmath::exp(sr[j] - m);
    sum = lanes.reduce(sum, Sum{}, C(0));
    for (int64_t j = lanes.lane; j < S; j += lanes.width) sr[j] = empty ? C(0) : dmath::exp(sr[j] - m) / sum;
    if (lanes.lane == 0) lse[row] = empty ? C(0) : m + dmath::log(sum);
  }
}

// Backward's P rebuilt from the scaled scores and the forward's logsumexp, element by element.
template <typename C>
__global__ void probs_kernel(C* s, const C* lse, MaskView mask, bool causal, int64_t L, int64_t S, int64_t total) {
  for (int64_t at = thread_index(); at < total; at += grid_width()) {
    const int64_t row = at / S;
    s[at] = dmath::exp(logit(s[at], mask, causal, row, at % S, L) - lse[row]);
  }
}

// out = o rounded once, and residual = (o - out) rounded, for half outputs (n values).
template <typename T>
__global__ void round_with_residual_kernel(const float* o, T* out, T* residual, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    const T rounded = Narrow<T>::from(o[i]);
    out[i] = rounded;
    residual[i] = Narrow<T>::from(o[i] - widen(rounded));
  }
}

// dS = P (dP - D) in place of dP, with D = rowsum(dO * (out + residual)) over the row's Ev values
// (residual: out's rounding error, or null); grad_mask (optional) gets a copy.
template <typename T, typename C, bool kBlockPerRow>
__global__ void score_grad_kernel(const C* p, C* dp, const T* go, const T* out, const T* residual, C* grad_mask,
                                  int64_t rows, int64_t S, int64_t Ev) {
  const RowLanes<kBlockPerRow> lanes;
  for (int64_t row = lanes.first_row; row < rows; row += lanes.row_step) {
    C d = 0;
    for (int64_t e = lanes.lane; e < Ev; e += lanes.width) {
      const int64_t at = row * Ev + e;
      const C o = static_cast<C>(widen(out[at])) + (residual ? static_cast<C>(widen(residual[at])) : C(0));
      d += static_cast<C>(widen(go[at])) * o;
    }
    d = lanes.reduce(d, Sum{}, C(0));
    for (int64_t j = lanes.lane; j < S; j += lanes.width) {
      const int64_t at = row * S + j;
      const C ds = p[at] * (dp[at] - d);
      dp[at] = ds;
      if (grad_mask) grad_mask[at] = ds;
    }
  }
}

// Regions of the attention scratch, 256-byte aligned.
class Regions {
 public:
  void* take(size_t bytes) {
    const size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    return base_ ? static_cast<char*>(base_) + at : nullptr;
  }
  size_t used() const { return used_; }
  void set_base(void* base) { base_ = base, used_ = 0; }

 private:
  void* base_ = nullptr;
  size_t used_ = 0;
};

}  // namespace

namespace {

// A batched product over the (batch, head) index: c = alpha * op(a) op(b), each [m, n] of c.
GemmArgs batched(const TensorRef& a, Transpose ta, const TensorRef& b, Transpose tb, const TensorRef& c, int64_t batch,
                 int64_t m, int64_t n, int64_t k, double alpha) {
  GemmArgs g;
  g.a = a, g.b = b, g.c = c;
  g.trans_a = ta, g.trans_b = tb;
  g.m = m, g.n = n, g.k = k, g.batch = batch;
  g.stride_a = m * k, g.stride_b = k * n, g.stride_c = m * n;
  g.alpha = alpha;
  return g;
}

// t as the statistics' dtype: itself, or widened into `scratch`.
TensorRef widened(Kernels& kernels, const TensorRef& t, DType stats, void* scratch) {
  if (t.dtype == stats) return t;
  const TensorRef wide{scratch, t.shape, stats};
  kernels.cast(t, wide);
  return wide;
}

// Calls fn(Tag<C>{}) with C the statistics' type: double for F64 inputs, else float.
template <typename Fn>
void dispatch_stats(DType stats, Fn&& fn) {
  if (stats == DType::F64) {
    fn(Tag<double>{});
  } else {
    fn(Tag<float>{});
  }
}

template <typename Launch>
void launch_rows(CudaKernels& k, int64_t rows, int64_t width, Launch&& launch) {
  if (width <= kWarpRow) {
    launch(std::false_type{}, k.blocks_for(rows * 32, kThreads));
  } else {
    launch(std::true_type{}, k.blocks_for(rows * kThreads, kThreads));
  }
}

}  // namespace

// out and out_residual from the fp32 output o of a half attention.
void CudaKernels::round_with_residual(const AttentionArgs& a, const TensorRef& o) {
  dispatch_floating(a.out.dtype, "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<acc_t<T>, T>) {
      const int64_t n = a.out.numel();
      round_with_residual_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(o.as<float>(), a.out.as<T>(),
                                                                                       a.out_residual.as<T>(), n);
      DEMI_CUDA_LAUNCH_CHECK("round_with_residual_kernel");
    }
  });
}

void CudaKernels::attention_forward_impl(const AttentionArgs& a, const AttnGeom& g) {
  const int64_t rows = g.batch * g.L;
  if (rows == 0) return;
  const DeviceGuard guard(index_);
  const DType stats = attention_stats_dtype(a.q.dtype);
  const MaskView mask = mask_view(a.mask, g);
  Regions r;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then addresses
    void* scores = r.take(static_cast<size_t>(rows * g.S) * dtype_size(stats));
    void* v_wide = a.v.dtype == stats ? nullptr : r.take(a.v.nbytes() / dtype_size(a.v.dtype) * dtype_size(stats));
    void* o_wide = a.out_residual.defined() ? r.take(static_cast<size_t>(a.out.numel()) * sizeof(float)) : nullptr;
    if (pass == 0) {
      r.set_base(attention_scratch(r.used()));
      continue;
    }
    const TensorRef s{scores, {g.batch, g.L, g.S}, stats};
    if (g.S > 0) gemm(batched(a.q, Transpose::No, a.k, Transpose::Yes, s, g.batch, g.L, g.S, g.E, a.scale));
    dispatch_stats(stats, [&](auto tag) {
      using C = typename decltype(tag)::type;
      launch_rows(*this, rows, g.S, [&](auto per_block, unsigned blocks) {
        softmax_rows_kernel<C, decltype(per_block)::value><<<blocks, kThreads, 0, stream_>>>(
            s.as<C>(), a.logsumexp.as<C>(), mask, a.causal, rows, g.L, g.S);
      });
      DEMI_CUDA_LAUNCH_CHECK("softmax_rows_kernel");
    });
    if (g.S == 0) {
      fill_impl(a.out, 0.0);
      if (a.out_residual.defined()) fill_impl(a.out_residual, 0.0);
      return;
    }
    const TensorRef v = widened(*this, a.v, stats, v_wide);
    const TensorRef o = o_wide ? TensorRef{o_wide, a.out.shape, DType::F32} : a.out;
    gemm(batched(s, Transpose::No, v, Transpose::No, o, g.batch, g.L, g.Ev, g.S, 1.0));
    if (o_wide) round_with_residual(a, o);
  }
}

void CudaKernels::attention_backward_impl(const AttentionArgs& a, const AttnGeom& g) {
  const int64_t rows = g.batch * g.L;
  if (g.batch == 0) return;
  const DeviceGuard guard(index_);
  if (g.L == 0 || g.S == 0) {  // no score: every gradient is 0
    for (const TensorRef* t : {&a.grad_q, &a.grad_k, &a.grad_v, &a.grad_mask}) {
      if (t->defined()) fill_impl(*t, 0.0);
    }
    return;
  }
  const DType stats = attention_stats_dtype(a.q.dtype);
  const size_t wide = dtype_size(stats), elem = dtype_size(a.q.dtype);
  const MaskView mask = mask_view(a.mask, g);
  Regions r;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then addresses
    void* p_bytes = r.take(static_cast<size_t>(rows * g.S) * wide);
    void* dp_bytes = r.take(static_cast<size_t>(rows * g.S) * wide);
    const bool half = a.q.dtype != stats;
    void* q_wide = half ? r.take(a.q.nbytes() / elem * wide) : nullptr;
    void* k_wide = half ? r.take(a.k.nbytes() / elem * wide) : nullptr;
    void* go_wide = half ? r.take(a.grad_out.nbytes() / elem * wide) : nullptr;
    if (pass == 0) {
      r.set_base(attention_scratch(r.used()));
      continue;
    }
    const TensorRef p{p_bytes, {g.batch, g.L, g.S}, stats}, dp{dp_bytes, {g.batch, g.L, g.S}, stats};
    gemm(batched(a.q, Transpose::No, a.k, Transpose::Yes, p, g.batch, g.L, g.S, g.E, a.scale));
    dispatch_stats(stats, [&](auto tag) {
      using C = typename decltype(tag)::type;
      const int64_t total = rows * g.S;
      probs_kernel<C><<<blocks_for(total, kThreads), kThreads, 0, stream_>>>(p.as<C>(), a.logsumexp.as<C>(), mask,
                                                                             a.causal, g.L, g.S, total);
      DEMI_CUDA_LAUNCH_CHECK("probs_kernel");
    });
    gemm(batched(a.grad_out, Transpose::No, a.v, Transpose::Yes, dp, g.batch, g.L, g.S, g.Ev, 1.0));
    dispatch_floating(a.q.dtype, "attention_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = acc_t<T>;
      C* grad_mask = a.grad_mask.defined() ? a.grad_mask.as<C>() : nullptr;
      launch_rows(*this, rows, std::max(g.S, g.Ev), [&](auto per_block, unsigned blocks) {
        score_grad_kernel<T, C, decltype(per_block)::value><<<blocks, kThreads, 0, stream_>>>(
            p.as<C>(), dp.as<C>(), a.grad_out.as<T>(), a.out.as<T>(),
            a.out_residual.defined() ? a.out_residual.as<T>() : nullptr, grad_mask, rows, g.S, g.Ev);
      });
      DEMI_CUDA_LAUNCH_CHECK("score_grad_kernel");
    });
    // dp now holds dS.
    if (a.grad_v.defined()) {
      const TensorRef go = widened(*this, a.grad_out, stats, go_wide);
      gemm(batched(p, Transpose::Yes, go, Transpose::No, a.grad_v, g.batch, g.S, g.Ev, g.L, 1.0));
    }
    if (a.grad_q.defined()) {
      const TensorRef k = widened(*this, a.k, stats, k_wide);
      gemm(batched(dp, Transpose::No, k, Transpose::No, a.grad_q, g.batch, g.L, g.E, g.S, a.scale));
    }
    if (a.grad_k.defined()) {
      const TensorRef q = widened(*this, a.q, stats, q_wide);
      gemm(batched(dp, Transpose::Yes, q, Transpose::No, a.grad_k, g.batch, g.S, g.E, g.L, a.scale));
    }
  }
}

}  // namespace demi::backend::cuda

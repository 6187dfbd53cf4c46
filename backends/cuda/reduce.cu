// Reductions (sum, mean, max, min) on CUDA into a keepdim-shaped y, and argmax / argmin, with the CPU backend's
// semantics.
// x is viewed, after merging neighbouring kept / reduced dims, as outputs x R reduced elements;
// every dtype accumulates in double as on the CPU (free here: the loops are memory-bound), and
// long reductions are split into fixed-size chunks whose partials a second kernel combines in a
// fixed order: no float atomics, so a result is the same run to run and on any GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <limits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;       // every kernel here; a multiple of 32
constexpr int kMaxDims = 8;         // kept (or reduced) dims after merging
constexpr int64_t kWarpRun = 1024;  // runs up to this long take one warp, longer ones a block
// Contiguous runs (innermost dim reduced): when there are fewer than kManyRuns outputs, each run
// is split into chunks of kRunChunk elements, one block each, so a full reduction fills the GPU.
constexpr int64_t kManyRuns = 1024;
constexpr int64_t kRunChunk = 8192;
// Columns (innermost dim kept, one thread per output): with fewer than kManyColumns outputs the
// reduced range is split into chunks of at least kColumnChunk elements.
constexpr int64_t kManyColumns = 65536;
constexpr int64_t kColumnChunk = 64;

// Sum (and mean) add; max and min keep the larger / smaller value and, like the CPU and PyTorch,
// propagate NaN.
struct Combine {
  ReduceKind kind;
  __device__ double identity() const {
    return kind == ReduceKind::Max ? -CUDART_INF : kind == ReduceKind::Min ? CUDART_INF : 0.0;
  }
  __device__ double operator()(double acc, double v) const {
    if (kind == ReduceKind::Max) return (v > acc || isnan(v)) ? v : acc;
    if (kind == ReduceKind::Min) return (v < acc || isnan(v)) ? v : acc;
    return acc + v;
  }
};

// x's merged dims, innermost first: kept ones (their mixed radix is y's flat index) and reduced ones
// (their mixed radix is the reduced index r in [0, R)), with x's element strides.
struct ReduceGeometry {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_extent[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  int64_t reduced_extent[kMaxDims] = {}, reduced_stride[kMaxDims] = {};
  int64_t outputs = 1, R = 1;
  int64_t chunk = 1, splits = 1;  // the reduced range is cut into `splits` chunks of `chunk` (the last shorter)
};

__device__ inline int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  int64_t offset = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {  // unrolled: the parameter arrays stay statically indexed
    if (d == g.kept_rank) break;
    offset += (o % g.kept_extent[d]) * g.kept_stride[d];
    o /= g.kept_extent[d];
  }
  return offset;
}

__device__ inline int64_t reduced_offset(const ReduceGeometry& g, int64_t r) {
  if (g.reduced_rank == 1) return r * g.reduced_stride[0];  // the common case: no divisions
  int64_t offset = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == g.reduced_rank) break;
    offset += (r % g.reduced_extent[d]) * g.reduced_stride[d];
    r /= g.reduced_extent[d];
  }
  return offset;
}

// Where a chunk's result goes: straight into y (one chunk per output) or into partial[s, o].
struct ReduceOutput {
  void* y = nullptr;
  DType dtype = DType::F32;
  int64_t mean_divisor = 0;  // R for a mean, 0 for sum and max
  double* partial = nullptr;

  // The finished value of output o, divided for a mean and rounded once into y's dtype.
  __device__ void finish(int64_t o, double v) const {
    if (mean_divisor != 0) v /= static_cast<double>(mean_divisor);
    switch (dtype) {
      case DType::F32: static_cast<float*>(y)[o] = static_cast<float>(v); break;
      case DType::F64: static_cast<double*>(y)[o] = v; break;
      case DType::F16: static_cast<__half*>(y)[o] = Narrow<__half>::from(v); break;
      case DType::BF16: static_cast<__nv_bfloat16*>(y)[o] = Narrow<__nv_bfloat16>::from(v); break;
      default: break;  // the host accepts floating dtypes only
    }
  }
  __device__ void chunk_result(const ReduceGeometry& g, int64_t o, int64_t s, double v) const {
    if (partial != nullptr) partial[s * g.outputs + o] = v;
    else finish(o, v);
  }
};

template <typename T>
__device__ inline double load(const T* x, int64_t i) {
  return static_cast<double>(widen(x[i]));
}

// The innermost dim of x is reduced: a group (a warp, or the block when kBlockPerGroup) per
// (output o, chunk s), its lanes striding over the chunk's reduced indices, so neighbouring lanes
// read neighbouring elements. Groups are RowLanes' rows, numbered o * splits + s.
template <typename T, bool kBlockPerGroup>
__global__ void reduce_runs_kernel(const T* x, ReduceGeometry g, Combine op, ReduceOutput out) {
  const RowLanes<kBlockPerGroup> lanes;
  const int64_t groups = g.outputs * g.splits;
  // The loop condition is uniform over a group, so the whole group reaches the reduction.
  for (int64_t group = lanes.first_row; group < groups; group += lanes.row_step) {
    const int64_t o = group / g.splits, s = group % g.splits;
    const int64_t base = kept_offset(g, o);
    const int64_t begin = s * g.chunk, end = min(begin + g.chunk, g.R);
    double acc = op.identity();
    for (int64_t r = begin + lanes.lane; r < end; r += lanes.width)
      acc = op(acc, load(x, base + reduced_offset(g, r)));
    acc = lanes.reduce(acc, op, op.identity());
    if (lanes.lane == 0) out.chunk_result(g, o, s, acc);
  }
}

// The innermost dim of x is kept (or nothing is reduced): a thread per (output o, chunk s), with o
// fastest so that neighbouring threads read neighbouring elements of each reduced row.
template <typename T>
__global__ void reduce_columns_kernel(const T* x, ReduceGeometry g, Combine op, ReduceOutput out) {
  const int64_t items = g.outputs * g.splits;
  for (int64_t t = thread_index(); t < items; t += grid_width()) {
    const int64_t o = t % g.outputs, s = t / g.outputs;
    const int64_t base = kept_offset(g, o);
    const int64_t begin = s * g.chunk, end = min(begin + g.chunk, g.R);
    double acc = op.identity();
    for (int64_t r = begin; r < end; ++r) acc = op(acc, load(x, base + reduced_offset(g, r)));
    out.chunk_result(g, o, s, acc);
  }
}

// partial [splits, outputs] -> y: a block per output combines its chunks' results, in a fixed order.
__global__ void reduce_partials_kernel(const double* partial, int64_t outputs, int64_t splits, Combine op,
                                       ReduceOutput out) {
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    double acc = op.identity();
    for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) acc = op(acc, partial[s * outputs + o]);
    acc = block_reduce(acc, op, op.identity());
    if (threadIdx.x == 0) out.finish(o, acc);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// argmax (argmin) over R of x [O, R, I]: one thread per output (o, i), walking R; the first maximum
// (minimum) wins and a NaN is the extreme, as on the CPU. Outputs are few (a batch of rows): no need
// to split R.
template <typename T, bool kMin>
__global__ void arg_reduce_kernel(const T* x, int64_t O, int64_t R, int64_t I, int64_t* y) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < O * I; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (t / I) * R * I + t % I;
    int64_t best = 0;
    double best_value = load(x, base);
    for (int64_t r = 1; r < R && !isnan(best_value); ++r) {
      const double v = load(x, base + r * I);
      if ((kMin ? v < best_value : v > best_value) || isnan(v)) {
        best = r;
        best_value = v;
      }
    }
    y[t] = best;
  }
}

// argmax / argmin on device k: x [O, R, I] floating -> y [O, 1, I] int64.
template <bool kMin>
void arg_reduce(const CudaKernels& k, const TensorRef& x, const TensorRef& y) {
  const int64_t O = x.shape[0], R = x.shape[1], I = x.shape[2];
  if (y.numel() == 0) return;
  const DeviceGuard guard(k.index());
  dispatch_floating(x.dtype, kMin ? "argmin" : "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    arg_reduce_kernel<T, kMin><<<k.blocks_for(O * I, kThreads), kThreads, 0, k.stream()>>>(x.as<const T>(), O, R, I,
                                                                                          y.as<int64_t>());
    DEMI_CUDA_LAUNCH_CHECK("arg_reduce_kernel");
  });
}

}  // namespace

void CudaKernels::argmax_impl(const TensorRef& x, const TensorRef& y) { arg_reduce<false>(*this, x, y); }
void CudaKernels::argmin_impl(const TensorRef& x, const TensorRef& y) { arg_reduce<true>(*this, x, y); }

// reduce: x [d0, ..., dn) of a floating dtype -> y of x's rank with each reduced dim of extent 1
// (or 0-d for a full reduction), of any floating dtype.
void CudaKernels::reduce_impl(ReduceKind kind, const TensorRef& x, const TensorRef& y, const ReduceDims& dims) {
  const char* name = reduce_name(kind);
  const int64_t R = dims.R, outputs = dims.outputs;
  const auto& groups = dims.groups;  // neighbouring dims of the same kind merged, outer first
  if (outputs == 0) return;
  if (R == 0) {  // an empty sum is 0, an empty mean 0 / 0 = NaN, as on the CPU
    const double empty = kind == ReduceKind::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0;
    fill(TensorRef{y.data, dims.keepdim, y.dtype}, empty);
    return;
  }

  ReduceGeometry g;
  g.outputs = outputs;
  g.R = R;
  int64_t stride = 1;
  for (size_t k = groups.size(); k-- > 0;) {  // innermost first
    const bool is_reduced = groups[k].second;
    int& rank = is_reduced ? g.reduced_rank : g.kept_rank;
    DEMI_CHECK(rank < kMaxDims, name, ": x ", x.shape, " -> y ", y.shape,
               " alternates kept and reduced dims more than ", kMaxDims,
               " times each, the CUDA backend's limit; reshape or reduce in two steps");
    (is_reduced ? g.reduced_extent : g.kept_extent)[rank] = groups[k].first;
    (is_reduced ? g.reduced_stride : g.kept_stride)[rank] = stride;
    ++rank;
    stride *= groups[k].first;
  }
  const bool inner_reduced = !groups.empty() && groups.back().second;
  // Chunks: fixed by the shape alone (never by the device), so results do not depend on the GPU.
  if (inner_reduced) {
    g.chunk = outputs >= kManyRuns ? R : std::min(R, kRunChunk);
  } else if (outputs >= kManyColumns || R <= kColumnChunk) {
    g.chunk = R;
  } else {
    const int64_t wanted_splits = std::min(ceil_div(R, kColumnChunk), ceil_div(kManyColumns, outputs));
    g.chunk = ceil_div(R, wanted_splits);
  }
  g.splits = ceil_div(R, g.chunk);

  const Combine op{kind == ReduceKind::Mean ? ReduceKind::Sum : kind};
  ReduceOutput out;
  out.y = y.data;
  out.dtype = y.dtype;
  out.mean_divisor = kind == ReduceKind::Mean ? R : 0;
  const DeviceGuard guard(index_);
  ReduceOutput chunk_out = out;
  if (g.splits > 1)
    chunk_out.partial = static_cast<double*>(workspace(static_cast<size_t>(outputs * g.splits) * sizeof(double)));
  const int64_t work = outputs * g.splits;
  dispatch_floating(x.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.as<const T>();
    if (!inner_reduced) {
      reduce_columns_kernel<T><<<blocks_for(work, kThreads), kThreads, 0, stream_>>>(px, g, op, chunk_out);
      DEMI_CUDA_LAUNCH_CHECK("reduce_columns_kernel");
    } else if (g.splits == 1 && R <= kWarpRun) {
      reduce_runs_kernel<T, false><<<blocks_for(work * 32, kThreads), kThreads, 0, stream_>>>(px, g, op, chunk_out);
      DEMI_CUDA_LAUNCH_CHECK("reduce_runs_kernel");
    } else {
      reduce_runs_kernel<T, true><<<blocks_for(work * kThreads, kThreads), kThreads, 0, stream_>>>(px, g, op, chunk_out);
      DEMI_CUDA_LAUNCH_CHECK("reduce_runs_kernel");
    }
  });
  if (g.splits == 1) return;
  reduce_partials_kernel<<<blocks_for(outputs * kThreads, kThreads), kThreads, 0, stream_>>>(
      chunk_out.partial, outputs, g.splits, op, out);
  DEMI_CUDA_LAUNCH_CHECK("reduce_partials_kernel");
}

}  // namespace demi::backend::cuda

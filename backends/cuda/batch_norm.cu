// CudaKernels::batch_norm_*: per-channel normalisation of [N, C] or [N, C, H, W] with the CPU
// backend's semantics. Each channel's N * H * W values are split into chunks, one block each, so a
// few wide channels still fill the GPU; blocks write per-chunk sums in double and one warp per
// channel adds them in a fixed order (deterministic, no atomics) before an element-wise pass.
// Variance uses sums shifted by one of the channel's values, in double: no E[x^2] - E[x]^2 cancellation.
// NHWC (channels_last) has sum kernels of its own, whose warps read 32 neighbouring channels of a row,
// and element-wise passes; the per-channel steps are shared.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;        // per block of the chunked passes (a multiple of 32)
constexpr int kItemsPerThread = 8;   // values a thread handles at least before a channel is split more
constexpr int64_t kMaxChunks = 65535;  // gridDim.y

// One channel-chunked pass: block (c, b) handles channel c's values e in [b * chunk_len,
// (b + 1) * chunk_len) of its count = N * HW, value e being element (e / HW) * C * HW + c * HW + e % HW.
struct BnShape {
  int64_t channels, hw, count, chunks, chunk_len;
};

// Calls fn(address) for the values e = first, first + step, ... of block `begin`'s chunk of channel
// c (first = begin + threadIdx.x, step = blockDim.x in the kernels). Divides once, then carries
// (n, j) forward. Host-callable, as the bodies below.
template <typename Fn>
__host__ __device__ inline void for_each_in_chunk(const BnShape& s, int64_t c, int64_t begin, int64_t first,
                                                  int64_t step, Fn&& fn) {
  const int64_t end = begin + s.chunk_len < s.count ? begin + s.chunk_len : s.count;
  int64_t e = first;
  if (e >= end) return;  // also keeps hw = 0 (count = 0) away from the divisions
  const int64_t plane = s.channels * s.hw;
  int64_t j = e % s.hw;
  int64_t address = (e / s.hw) * plane + c * s.hw + j;
  const int64_t dj = step % s.hw, jump = (step / s.hw) * plane + dj, wrap = plane - s.hw;
  for (; e < end; e += step) {
    fn(address);
    j += dj;
    address += jump;
    if (j >= s.hw) {  // past the end of a plane: on to the same channel's next plane
      j -= s.hw;
      address += wrap;
    }
  }
}

// Channel c's chunk sums, added in chunk order by one warp (launched with 32 threads); in every lane.
__device__ inline double2 channel_sum(const double2* partials, int64_t c, int64_t chunks) {
  double2 v = make_double2(0.0, 0.0);
  for (int64_t k = threadIdx.x; k < chunks; k += 32) {
    const double2 p = partials[c * chunks + k];
    v.x += p.x;
    v.y += p.y;
  }
  return warp_reduce(v, Sum{});
}

// The per-thread and per-channel bodies below are __host__ __device__ so that they can be emulated
// on the host against the CPU backend (how they were checked before any GPU ran them); the kernels
// add only the block and warp sums.

// --- Forward -------------------------------------------------------------------------------------

// (sum d, sum d^2) over this thread's values of a chunk of channel c, d = x - (value 0 of channel
// c), in double. The shift keeps the variance from cancelling when the mean is large against the
// spread. Needs count > 1 (training), so value 0 exists.
template <typename T>
__host__ __device__ inline double2 bn_stats_part(const T* x, const BnShape& s, int64_t c, int64_t begin,
                                                 int64_t first, int64_t step) {
  const double shift = static_cast<double>(widen(x[c * s.hw]));
  double2 sum = make_double2(0.0, 0.0);
  for_each_in_chunk(s, c, begin, first, step, [&](int64_t a) {
    const double d = static_cast<double>(widen(x[a])) - shift;
    sum.x += d;
    sum.y += d * d;
  });
  return sum;
}

// Per-channel vectors [C] of the forward, in the statistics type S; any may be null but those the
// mode needs.
template <typename S>
struct BnForwardParams {
  const S* weight;
  const S* bias;
  S* running_mean;
  S* running_var;
  S* save_mean;
  S* save_invstd;
  double momentum, eps;
  bool train;
};

// y = ((x - hi) - lo) * scale + shift per channel, in the compute type A: the mean as hi + lo
// (hi = the mean rounded to A) keeps x - mean exact near the mean, as on the CPU.
template <typename A>
struct NormalizeCoef {
  A mean_hi, mean_lo, scale, shift;
};

// Training: channel c's sums (bn_stats_part over all its values, shifted by its value 0 = x[first])
// -> mean, biased variance, save_*, running stats (unbiased variance). Eval: the running stats.
// Returns the normalisation coefficients.
template <typename T, typename S>
__host__ __device__ inline NormalizeCoef<acc_t<T>> bn_forward_channel(double2 sum, const T* x, int64_t first,
                                                                      const BnShape& s, const BnForwardParams<S>& p,
                                                                      int64_t c) {
  using A = acc_t<T>;
  double mean, invstd;
  if (p.train) {
    const double count = static_cast<double>(s.count);
    const double offset = sum.x / count;  // mean - shift
    mean = static_cast<double>(widen(x[first])) + offset;
    double var = (sum.y - sum.x * offset) / count;
    if (var < 0) var = 0;  // rounding of a (near) constant channel; a NaN stays NaN
    invstd = 1.0 / ::sqrt(var + p.eps);
    if (p.save_mean) p.save_mean[c] = static_cast<S>(mean);
    if (p.save_invstd) p.save_invstd[c] = static_cast<S>(invstd);
    const double m = p.momentum;
    if (p.running_mean) {
      S& rm = p.running_mean[c];
      rm = static_cast<S>((1 - m) * static_cast<double>(rm) + m * mean);
    }
    if (p.running_var) {
      S& rv = p.running_var[c];
      rv = static_cast<S>((1 - m) * static_cast<double>(rv) + m * var * count / (count - 1));
    }
  } else {
    mean = static_cast<double>(p.running_mean[c]);
    invstd = 1.0 / ::sqrt(static_cast<double>(p.running_var[c]) + p.eps);
  }
  NormalizeCoef<A> k;
  k.mean_hi = static_cast<A>(mean);
  k.mean_lo = static_cast<A>(mean - static_cast<double>(k.mean_hi));
  k.scale = static_cast<A>(invstd * (p.weight ? static_cast<double>(p.weight[c]) : 1.0));
  k.shift = static_cast<A>(p.bias ? static_cast<double>(p.bias[c]) : 0.0);
  return k;
}

// y = ((x - mean_hi) - mean_lo) * scale + shift, rounded once into T, over this thread's values of
// a chunk of channel c; y may be x.
template <typename T>
__host__ __device__ inline T bn_normalize_one(T x, const NormalizeCoef<acc_t<T>>& k) {
  return Narrow<T>::from(add_rn(mul_rn((widen(x) - k.mean_hi) - k.mean_lo, k.scale), k.shift));
}
template <typename T>
__host__ __device__ inline void bn_normalize_part(const T* x, T* y, const BnShape& s, int64_t c, int64_t begin,
                                                  int64_t first, int64_t step, const NormalizeCoef<acc_t<T>>& k) {
  for_each_in_chunk(s, c, begin, first, step, [&](int64_t a) { y[a] = bn_normalize_one(x[a], k); });
}

// partials[c * chunks + b] = block b's bn_stats_part sums over channel c.
template <typename T>
__global__ void bn_stats_kernel(const T* x, BnShape s, double2* partials) {
  const int64_t begin = int64_t(blockIdx.y) * s.chunk_len;
  const double2 part = bn_stats_part(x, s, blockIdx.x, begin, begin + threadIdx.x, blockDim.x);
  const double2 sum = block_reduce(part, Sum{}, make_double2(0.0, 0.0));
  if (threadIdx.x == 0) partials[int64_t(blockIdx.x) * s.chunks + blockIdx.y] = sum;
}

// coef[c] = bn_forward_channel of channel c = blockIdx.x; one 32-thread block per channel. Channel
// c's value 0 is x[c * hw], or x[c] in NHWC.
template <typename T, typename S>
__global__ void bn_forward_finalize_kernel(const double2* partials, const T* x, BnShape s,
                                           BnForwardParams<S> p, NormalizeCoef<acc_t<T>>* coef, bool nhwc) {
  const int64_t c = blockIdx.x;
  const double2 sum = p.train ? channel_sum(partials, c, s.chunks) : make_double2(0.0, 0.0);
  if (threadIdx.x == 0) coef[c] = bn_forward_channel(sum, x, nhwc ? c : c * s.hw, s, p, c);
}

template <typename T>
__global__ void bn_normalize_kernel(const T* x, T* y, BnShape s, const NormalizeCoef<acc_t<T>>* coef) {
  const int64_t begin = int64_t(blockIdx.y) * s.chunk_len;
  bn_normalize_part(x, y, s, blockIdx.x, begin, begin + threadIdx.x, blockDim.x, coef[blockIdx.x]);
}

// --- Backward ------------------------------------------------------------------------------------

// (sum g, sum g * (x - mean)) over this thread's values of a chunk of channel c, in double, with
// mean = save_mean[c] in the compute type (the CPU's mean_acc).
template <typename T, typename S>
__host__ __device__ inline double2 bn_backward_part(const T* x, const T* grad_y, const S* save_mean,
                                                    const BnShape& s, int64_t c, int64_t begin, int64_t first,
                                                    int64_t step) {
  const double mean = static_cast<double>(static_cast<acc_t<T>>(save_mean[c]));
  double2 sum = make_double2(0.0, 0.0);
  for_each_in_chunk(s, c, begin, first, step, [&](int64_t a) {
    const double g = static_cast<double>(widen(grad_y[a]));
    sum.x += g;
    sum.y += g * (static_cast<double>(widen(x[a])) - mean);
  });
  return sum;
}

template <typename S>
struct BnBackwardParams {
  const S* weight;  // null: 1
  const S* save_mean;
  const S* save_invstd;
  S* grad_weight;  // null: not wanted
  S* grad_bias;
};

// grad_x = (g * k_g + (x - mean) * k_d) + k_0 per channel, in the compute type A.
template <typename A>
struct GradCoef {
  A mean, k_g, k_d, k_0;
};

// Channel c's sums (bn_backward_part over all its values) -> grad_weight = sum(g * xhat), grad_bias
// = sum(g), and the grad_x coefficients of invstd * w * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T, typename S>
__host__ __device__ inline GradCoef<acc_t<T>> bn_backward_channel(double2 sum, const BnShape& s,
                                                                  const BnBackwardParams<S>& p, int64_t c) {
  using A = acc_t<T>;
  const double sum_g = sum.x, sum_gd = sum.y, count = static_cast<double>(s.count);
  const double mean = static_cast<double>(p.save_mean[c]), invstd = static_cast<double>(p.save_invstd[c]);
  if (p.grad_weight) p.grad_weight[c] = static_cast<S>(sum_gd * invstd);
  if (p.grad_bias) p.grad_bias[c] = static_cast<S>(sum_g);
  const double k = invstd * (p.weight ? static_cast<double>(p.weight[c]) : 1.0);
  GradCoef<A> q;
  q.mean = static_cast<A>(mean);
  q.k_g = static_cast<A>(k);
  q.k_d = static_cast<A>(-k * invstd * invstd * sum_gd / count);
  q.k_0 = static_cast<A>(-k * sum_g / count);
  return q;
}

// grad_x over this thread's values of a chunk of channel c, rounded once into T; grad_x may alias
// x or grad_y.
template <typename T>
__host__ __device__ inline T bn_grad_input_one(T x, T grad_y, const GradCoef<acc_t<T>>& q) {
  const acc_t<T> v = add_rn(mul_rn(widen(grad_y), q.k_g), mul_rn(widen(x) - q.mean, q.k_d));
  return Narrow<T>::from(add_rn(v, q.k_0));
}
template <typename T>
__host__ __device__ inline void bn_backward_input_part(const T* x, const T* grad_y, T* grad_x, const BnShape& s,
                                                       int64_t c, int64_t begin, int64_t first, int64_t step,
                                                       const GradCoef<acc_t<T>>& q) {
  for_each_in_chunk(s, c, begin, first, step, [&](int64_t a) { grad_x[a] = bn_grad_input_one(x[a], grad_y[a], q); });
}

template <typename T, typename S>
__global__ void bn_backward_stats_kernel(const T* x, const T* grad_y, const S* save_mean, BnShape s,
                                         double2* partials) {
  const int64_t begin = int64_t(blockIdx.y) * s.chunk_len;
  const double2 part = bn_backward_part(x, grad_y, save_mean, s, blockIdx.x, begin, begin + threadIdx.x, blockDim.x);
  const double2 sum = block_reduce(part, Sum{}, make_double2(0.0, 0.0));
  if (threadIdx.x == 0) partials[int64_t(blockIdx.x) * s.chunks + blockIdx.y] = sum;
}

// coef[c] = bn_backward_channel of channel c = blockIdx.x; one 32-thread block per channel.
template <typename T, typename S>
__global__ void bn_backward_finalize_kernel(const double2* partials, BnShape s,
                                            BnBackwardParams<S> p, GradCoef<acc_t<T>>* coef) {
  const int64_t c = blockIdx.x;
  const double2 sum = channel_sum(partials, c, s.chunks);
  if (threadIdx.x == 0) coef[c] = bn_backward_channel<T>(sum, s, p, c);
}

template <typename T>
__global__ void bn_backward_input_kernel(const T* x, const T* grad_y, T* grad_x, BnShape s,
                                         const GradCoef<acc_t<T>>* coef) {
  const int64_t begin = int64_t(blockIdx.y) * s.chunk_len;
  bn_backward_input_part(x, grad_y, grad_x, s, blockIdx.x, begin, begin + threadIdx.x, blockDim.x, coef[blockIdx.x]);
}

// --- NHWC ----------------------------------------------------------------------------------------

// Channel c's value e (e < count = N * H * W) is element e * C + c. The sum kernels run blocks of
// kNhwcChannels neighbouring channels by kNhwcRows rows over a chunk of rows: a warp reads one
// contiguous run of a row, each thread sums its channel over every kNhwcRows-th row of the chunk,
// and the row sums meet in shared memory in a fixed order (deterministic, no atomics).
constexpr int kNhwcChannels = 32, kNhwcRows = kThreads / kNhwcChannels;

// The block's (sum a, sum b) per channel in the threadIdx.y == 0 row, each thread's part given.
__device__ inline double2 sum_over_rows(double2 part) {
  __shared__ double2 rows[kNhwcRows][kNhwcChannels];
  rows[threadIdx.y][threadIdx.x] = part;
  __syncthreads();
  double2 sum = make_double2(0.0, 0.0);
  if (threadIdx.y == 0) {
    for (int r = 0; r < kNhwcRows; ++r) {
      sum.x += rows[r][threadIdx.x].x;
      sum.y += rows[r][threadIdx.x].y;
    }
  }
  return sum;
}

// partials[c * chunks + chunk] = f's (sum a, sum b) over channel c's rows of chunk blockIdx.y, with
// f(address, c) giving one value's (a, b); c = blockIdx.x * kNhwcChannels + threadIdx.x.
template <typename F>
__device__ inline void nhwc_chunk_sums(const BnShape& s, double2* partials, F&& f) {
  const int64_t c = int64_t(blockIdx.x) * kNhwcChannels + threadIdx.x;
  const int64_t begin = int64_t(blockIdx.y) * s.chunk_len;
  const int64_t end = begin + s.chunk_len < s.count ? begin + s.chunk_len : s.count;
  double2 part = make_double2(0.0, 0.0);
  if (c < s.channels) {
    for (int64_t e = begin + threadIdx.y; e < end; e += kNhwcRows) {
      const double2 v = f(e * s.channels + c, c);
      part.x += v.x;
      part.y += v.y;
    }
  }
  const double2 sum = sum_over_rows(part);
  if (threadIdx.y == 0 && c < s.channels) partials[c * s.chunks + blockIdx.y] = sum;
}

// bn_stats_kernel's sums (d, d^2), d = x - (value 0 of channel c = x[c]).
template <typename T>
__global__ void bn_stats_nhwc_kernel(const T* x, BnShape s, double2* partials) {
  nhwc_chunk_sums(s, partials, [x](int64_t a, int64_t c) {
    const double d = static_cast<double>(widen(x[a])) - static_cast<double>(widen(x[c]));
    return make_double2(d, d * d);
  });
}

// bn_backward_stats_kernel's sums (g, g * (x - mean)).
template <typename T, typename S>
__global__ void bn_backward_stats_nhwc_kernel(const T* x, const T* grad_y, const S* save_mean, BnShape s,
                                              double2* partials) {
  nhwc_chunk_sums(s, partials, [=](int64_t a, int64_t c) {
    const double mean = static_cast<double>(static_cast<acc_t<T>>(save_mean[c]));
    const double g = static_cast<double>(widen(grad_y[a]));
    return make_double2(g, g * (static_cast<double>(widen(x[a])) - mean));
  });
}

// The element-wise passes over n = count * C elements, channel i % C.
template <typename T>
__global__ void bn_normalize_nhwc_kernel(const T* x, T* y, int64_t n, int64_t channels,
                                         const NormalizeCoef<acc_t<T>>* coef) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) y[i] = bn_normalize_one(x[i], coef[i % channels]);
}
template <typename T>
__global__ void bn_backward_input_nhwc_kernel(const T* x, const T* grad_y, T* grad_x, int64_t n, int64_t channels,
                                              const GradCoef<acc_t<T>>* coef) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    grad_x[i] = bn_grad_input_one(x[i], grad_y[i], coef[i % channels]);
  }
}

// --- Host side -----------------------------------------------------------------------------------

template <typename S>
S* data_or_null(const TensorRef& t) {
  return t.defined() ? t.as<S>() : nullptr;
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Every pass has a block per channel in gridDim.x: the CUDA backend's one limit on top of the shared
// checks (backends/kernel_checks.h).
void check_channels(const BnGeom& g, const TensorRef& x, const char* op) {
  DEMI_CHECK(g.c <= std::numeric_limits<int32_t>::max(), op, ": the CUDA backend handles up to 2^31 - 1 channels, got ",
             x.shape, "; split the channels");
}

// The blocks a chunked pass over g wants: one per kThreads * kItemsPerThread values, at most what
// fills the GPU once.
int64_t wanted_blocks(const CudaKernels& k, const BnGeom& g) {
  return k.blocks_for(std::max<int64_t>(1, g.c * g.count() / kItemsPerThread), kThreads);
}

// Splits each channel (C > 0) into chunks so that the sum kernels' grid covers `blocks`: C * chunks
// blocks, or ceil(C / kNhwcChannels) * chunks in NHWC.
BnShape chunk_shape(const BnGeom& g, int64_t blocks, bool nhwc) {
  const int64_t columns = nhwc ? (g.c + kNhwcChannels - 1) / kNhwcChannels : g.c;
  const int64_t chunks = std::min(std::max<int64_t>((blocks + columns - 1) / columns, 1), kMaxChunks);
  return {g.c, g.hw, g.count(), chunks, std::max<int64_t>(1, (g.count() + chunks - 1) / chunks)};
}

// The sum kernels' grid: a block per (channel, chunk), or per (kNhwcChannels channels, chunk).
dim3 sums_grid(const BnShape& s, bool nhwc) {
  const int64_t columns = nhwc ? (s.channels + kNhwcChannels - 1) / kNhwcChannels : s.channels;
  return dim3(static_cast<unsigned>(columns), static_cast<unsigned>(s.chunks));
}
dim3 sums_block(bool nhwc) { return nhwc ? dim3(kNhwcChannels, kNhwcRows) : dim3(kThreads); }

}  // namespace

// batch_norm_forward: input [N, C] or [N, C, H, W] -> output (input's shape and dtype); training
// also writes save_mean, save_invstd and updates running_* (each if given). Passes: chunk sums
// (training only), per-channel statistics, normalisation.
void CudaKernels::batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_forward";
  check_channels(g, args.input, op);
  const bool train = args.mode == BatchNormMode::Train;
  dispatch_floating(args.input.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = acc_t<T>;  // fp32 statistics for fp32 and half inputs, fp64 for fp64
    if (args.input.numel() == 0) return;  // eval only: training has count > 1
    const DeviceGuard guard(index_);
    const bool nhwc = args.channels_last;
    const BnShape s = chunk_shape(g, wanted_blocks(*this, g), nhwc);
    const size_t partial_bytes = train ? round_up(static_cast<size_t>(g.c * s.chunks) * sizeof(double2)) : 0;
    char* ws = static_cast<char*>(workspace(partial_bytes + static_cast<size_t>(g.c) * sizeof(NormalizeCoef<S>)));
    double2* partials = reinterpret_cast<double2*>(ws);
    NormalizeCoef<S>* coef = reinterpret_cast<NormalizeCoef<S>*>(ws + partial_bytes);
    const T* x = args.input.as<const T>();
    const dim3 grid = sums_grid(s, nhwc);
    if (train && nhwc) {
      bn_stats_nhwc_kernel<T><<<grid, sums_block(nhwc), 0, stream_>>>(x, s, partials);
      DEMI_CUDA_LAUNCH_CHECK("bn_stats_nhwc_kernel");
    } else if (train) {
      bn_stats_kernel<T><<<grid, kThreads, 0, stream_>>>(x, s, partials);
      DEMI_CUDA_LAUNCH_CHECK("bn_stats_kernel");
    }
    const BnForwardParams<S> p{data_or_null<const S>(args.weight),       data_or_null<const S>(args.bias),
                               data_or_null<S>(args.running_mean),       data_or_null<S>(args.running_var),
                               train ? data_or_null<S>(args.save_mean) : nullptr,
                               train ? data_or_null<S>(args.save_invstd) : nullptr,
                               args.momentum, args.eps, train};
    bn_forward_finalize_kernel<T, S><<<static_cast<unsigned>(g.c), 32, 0, stream_>>>(partials, x, s, p, coef, nhwc);
    DEMI_CUDA_LAUNCH_CHECK("bn_forward_finalize_kernel");
    if (nhwc) {
      const int64_t n = args.input.numel();
      bn_normalize_nhwc_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(x, args.output.as<T>(), n, g.c,
                                                                                     coef);
      DEMI_CUDA_LAUNCH_CHECK("bn_normalize_nhwc_kernel");
      return;
    }
    bn_normalize_kernel<T><<<grid, kThreads, 0, stream_>>>(x, args.output.as<T>(), s, coef);
    DEMI_CUDA_LAUNCH_CHECK("bn_normalize_kernel");
  });
}

// batch_norm_backward: input and grad_output [N, C] or [N, C, H, W], weight, save_mean, save_invstd
// [C] -> grad_input (input's shape), grad_weight, grad_bias [C], each only if given. Passes: chunk
// sums of g and g * (x - mean), per-channel results, grad_input.
void CudaKernels::batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) {
  constexpr const char* op = "batch_norm_backward";
  check_channels(g, args.input, op);
  dispatch_floating(args.input.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = acc_t<T>;
    const bool wants_input = args.grad_input.defined() && args.input.numel() > 0;
    if (g.c == 0 || !(wants_input || args.grad_weight.defined() || args.grad_bias.defined())) return;
    const DeviceGuard guard(index_);
    // count = 0 (an empty batch) still runs the sums: grad_weight and grad_bias become 0, as on the CPU.
    const bool nhwc = args.channels_last;
    const BnShape s = chunk_shape(g, wanted_blocks(*this, g), nhwc);
    const size_t partial_bytes = round_up(static_cast<size_t>(g.c * s.chunks) * sizeof(double2));
    char* ws = static_cast<char*>(workspace(partial_bytes + static_cast<size_t>(g.c) * sizeof(GradCoef<S>)));
    double2* partials = reinterpret_cast<double2*>(ws);
    GradCoef<S>* coef = reinterpret_cast<GradCoef<S>*>(ws + partial_bytes);
    const T* x = args.input.as<const T>();
    const T* grad_y = args.grad_output.as<const T>();
    const dim3 grid = sums_grid(s, nhwc);
    if (nhwc) {
      bn_backward_stats_nhwc_kernel<T, S><<<grid, sums_block(nhwc), 0, stream_>>>(
          x, grad_y, args.save_mean.as<const S>(), s, partials);
      DEMI_CUDA_LAUNCH_CHECK("bn_backward_stats_nhwc_kernel");
    } else {
      bn_backward_stats_kernel<T, S><<<grid, kThreads, 0, stream_>>>(x, grad_y, args.save_mean.as<const S>(), s,
                                                                      partials);
      DEMI_CUDA_LAUNCH_CHECK("bn_backward_stats_kernel");
    }
    const BnBackwardParams<S> p{data_or_null<const S>(args.weight), args.save_mean.as<const S>(),
                                args.save_invstd.as<const S>(), data_or_null<S>(args.grad_weight),
                                data_or_null<S>(args.grad_bias)};
    bn_backward_finalize_kernel<T, S><<<static_cast<unsigned>(g.c), 32, 0, stream_>>>(partials, s, p, coef);
    DEMI_CUDA_LAUNCH_CHECK("bn_backward_finalize_kernel");
    if (!wants_input) return;
    if (nhwc) {
      const int64_t n = args.input.numel();
      bn_backward_input_nhwc_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
          x, grad_y, args.grad_input.as<T>(), n, g.c, coef);
      DEMI_CUDA_LAUNCH_CHECK("bn_backward_input_nhwc_kernel");
      return;
    }
    bn_backward_input_kernel<T><<<grid, kThreads, 0, stream_>>>(x, grad_y, args.grad_input.as<T>(), s, coef);
    DEMI_CUDA_LAUNCH_CHECK("bn_backward_input_kernel");
  });
}

}  // namespace demi::backend::cuda

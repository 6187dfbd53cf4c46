// Element-wise kernels on CUDA: fill, cast, unary, (broadcasting) binary and where, with the CPU backend's
// semantics (backends/kernels.h). Half types are computed in fp32 and rounded once on store. One
// kernel per dtype with the op as a uniform runtime switch: these loops are memory-bound, and it
// keeps the instantiations (and the compile time of every CI run) small.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/host_reads.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;  // dimensions a broadcast can keep after coalescing
constexpr double kSqrtHalf = 0.70710678118654752440;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// --- The ops, in the arithmetic type A (float or double) ---------------------------------------

template <typename A>
__device__ inline A unary_op(UnaryKind kind, A x, A alpha, A beta) {
  switch (kind) {
    case UnaryKind::Neg: return -x;
    case UnaryKind::Exp: return dmath::exp(x);
    case UnaryKind::Log: return dmath::log(x);
    case UnaryKind::Sqrt: return dmath::sqrt(x);
    case UnaryKind::Relu: return x < A(0) ? A(0) : x;  // a select, not max(x, 0): NaN stays NaN
    case UnaryKind::Gelu: return A(0.5) * x * (A(1) + dmath::erf(x * A(kSqrtHalf)));
    case UnaryKind::Pow: return dmath::pow_scalar(x, alpha);
    case UnaryKind::Affine: return dmath::affine(x, alpha, beta);
    case UnaryKind::DivScalar: return x / alpha;
    case UnaryKind::Clamp: {  // selects (NaN stays NaN), the upper bound last: min > max gives max
      const A low = x < alpha ? alpha : x;
      return low > beta ? beta : low;
    }
    case UnaryKind::Abs:  // the sign bit cleared: |-0| = +0, NaN stays NaN
      if constexpr (std::is_same_v<A, float>) return ::fabsf(x);
      else return ::fabs(x);
    case UnaryKind::Sign: return A(x > A(0)) - A(x < A(0));  // two compares: NaN gives 0, as PyTorch
  }
  return x;
}

template <typename A>
__device__ inline A binary_op(BinaryKind kind, A a, A b) {
  switch (kind) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
    // A select, not a * (b > 0): an inf or NaN gradient where the unit is off gives 0, not NaN;
    // a NaN b passes a (PyTorch's threshold_backward: 0 where b <= 0).
    case BinaryKind::ReluBackward: return b <= A(0) ? A(0) : a;
    case BinaryKind::GeluBackward: {  // d/dx [x Phi(x)] = Phi(x) + x phi(x)
      const A cdf = A(0.5) * (A(1) + dmath::erf(b * A(kSqrtHalf)));
      const A pdf = dmath::exp(A(-0.5) * b * b) * A(kInvSqrt2Pi);
      return a * (cdf + b * pdf);
    }
    case BinaryKind::Eq: return a == b ? A(1) : A(0);
    case BinaryKind::Ne: return a != b ? A(1) : A(0);
    case BinaryKind::Lt: return a < b ? A(1) : A(0);
    case BinaryKind::Le: return a <= b ? A(1) : A(0);
    case BinaryKind::Gt: return a > b ? A(1) : A(0);
    case BinaryKind::Ge: return a >= b ? A(1) : A(0);
  }
  return a;
}

// --- Kernels (all grid-stride loops over contiguous row-major buffers) -------------------------

// y[i] = value for i in [0, n): y holds n elements of `Bits`' width (the value's bit pattern).
template <typename Bits>
__global__ void fill_kernel(Bits* y, Bits value, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = value;
}

// y[i] = x[i] rounded once into To, for i in [0, n): x of From, y of a floating To, same numel.
template <typename To, typename From>
__global__ void cast_kernel(const From* x, To* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = Narrow<To>::from(widen(x[i]));
}

// y[i] = x[i] truncated toward zero, for i in [0, n): x of From, y of an integer To, same numel.
// An element that does not fit is not written; the smallest such i goes to *first_bad, which the
// host set to all ones beforehand.
template <typename To, typename From>
__global__ void cast_to_integer_kernel(const From* x, To* y, int64_t n, unsigned long long* first_bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(widen(x[i]));
    if (fits_integer<To>(v)) y[i] = static_cast<To>(v);
    else atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// y[i] = op(x[i]) for i in [0, n): x and y of T, same numel (may alias).
template <typename T>
__global__ void unary_kernel(UnaryKind kind, const T* x, T* y, int64_t n, acc_t<T> alpha, acc_t<T> beta) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = Narrow<T>::from(unary_op(kind, widen(x[i]), alpha, beta));
}

// y[i] = op(a[i], b[i]) for i in [0, n): a, b and y of T and the same shape.
template <typename T>
__global__ void binary_kernel(BinaryKind kind, const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = Narrow<T>::from(binary_op(kind, widen(a[i]), widen(b[i])));
}

// y's extents after coalescing, innermost first, with each of N operands' element strides along
// each (0 where that operand is broadcast).
template <typename Index, int N>
struct BroadcastIndex {
  int rank = 0;
  Index extent[kMaxDims] = {};
  Index stride[N][kMaxDims] = {};

  // The operands' element offsets of y's element i (row-major).
  __device__ void offsets(Index i, Index (&offset)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) offset[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {  // unrolled: the parameter arrays stay statically indexed
      if (d == rank) break;
      const Index coord = i % extent[d];
      i /= extent[d];
#pragma unroll
      for (int k = 0; k < N; ++k) offset[k] += coord * stride[k][d];
    }
  }
};

// y[i] = op(a[offset_a(i)], b[offset_b(i)]) for i in [0, n) = y's elements in row-major order.
// Index is uint32_t when n < 2^31 (its divisions are several times cheaper than int64's).
template <typename T, typename Index>
__global__ void binary_broadcast_kernel(BinaryKind kind, const T* a, const T* b, T* y, Index n,
                                        BroadcastIndex<Index, 2> ix) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index offset[2];
    ix.offsets(i, offset);
    y[i] = Narrow<T>::from(binary_op(kind, widen(a[offset[0]]), widen(b[offset[1]])));
  }
}

// y[i] = cond[offset_c(i)] ? a[offset_a(i)] : b[offset_b(i)], element bits of width Bits copied.
template <typename Bits, typename Index>
__global__ void where_kernel(const uint8_t* cond, const Bits* a, const Bits* b, Bits* y, Index n,
                             BroadcastIndex<Index, 3> ix) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index offset[3];
    ix.offsets(i, offset);
    y[i] = cond[offset[0]] ? a[offset[1]] : b[offset[2]];
  }
}

// --- Host helpers ------------------------------------------------------------------------------

// The value of one element of dtype `dtype` whose bytes are the low bytes of `raw` (little-endian).
double host_value(DType dtype, uint64_t raw) {
  switch (dtype) {
    case DType::F32: { float v; std::memcpy(&v, &raw, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, &raw, 8); return v; }
    case DType::F16: return Half::from_bits(static_cast<uint16_t>(raw));
    case DType::BF16: return BFloat16::from_bits(static_cast<uint16_t>(raw));
    case DType::I64: return static_cast<double>(static_cast<int64_t>(raw));
    case DType::U8: return static_cast<double>(raw & 0xff);
  }
  return 0.0;
}

// Element strides of contiguous `s` seen in y's index space: aligned from the right, 0 where s has
// extent 1 (broadcast) or no dimension at all. Throws when s does not broadcast to y's shape.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& y, const char* op, const char* name) {
  DEMI_CHECK(s.size() <= y.size(), op, ": ", name, " ", s, " does not broadcast to y's shape ", y,
             " (more dimensions); y must have the broadcast shape of a and b or a larger one");
  std::vector<int64_t> strides(y.size(), 0);
  int64_t running = 1;
  for (size_t k = 0; k < s.size(); ++k) {
    const int64_t extent = s[s.size() - 1 - k];
    const size_t dim = y.size() - 1 - k;
    DEMI_CHECK(extent == y[dim] || extent == 1, op, ": ", name, " ", s,
               " does not broadcast to y's shape ", y, " (dimension ", dim, " is ", extent, " vs ",
               y[dim], "); extents must match or be 1");
    strides[dim] = extent == 1 ? 0 : running;
    running *= extent;
  }
  return strides;
}

// y's dimensions, innermost first, without extents of 1 and with neighbours merged wherever every
// operand stays linear across them: [N, C, H, W] + [C, 1, 1] becomes [N, C, H*W] + [C, 1].
template <typename Index, int N>
BroadcastIndex<Index, N> coalesce(const Shape& y, const std::vector<int64_t> (&strides)[N], const char* op) {
  struct Dim {
    int64_t extent, stride[N];
  };
  std::vector<Dim> dims;
  for (size_t k = y.size(); k-- > 0;) {
    if (y[k] == 1) continue;
    Dim d{y[k], {}};
    bool merge = !dims.empty();
    for (int j = 0; j < N; ++j) {
      d.stride[j] = strides[j][k];
      merge = merge && d.stride[j] == dims.back().stride[j] * dims.back().extent;
    }
    if (merge) dims.back().extent *= d.extent;
    else dims.push_back(d);
  }
  DEMI_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), op, ": y's shape ", y, " needs ", dims.size(),
             " dimensions after merging, the CUDA backend handles up to ", kMaxDims,
             "; reshape the operands to fewer dimensions");
  BroadcastIndex<Index, N> ix;
  ix.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.extent[d] = static_cast<Index>(dims[d].extent);
    for (int j = 0; j < N; ++j) ix.stride[j][d] = static_cast<Index>(dims[d].stride[j]);
  }
  return ix;
}

}  // namespace

// fill: y (any dtype, n elements) = value rounded once into y's dtype. Integer dtypes take the
// value truncated toward zero and refuse one that does not fit rather than wrap it silently.
void CudaKernels::fill_impl(const TensorRef& y, double value) {
  uint64_t bits = 0;
  switch (y.dtype) {
    case DType::F32: { const float v = static_cast<float>(value); std::memcpy(&bits, &v, 4); break; }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    // Straight from double, one rounding (cuda_fp16's host conversions), like the CPU's round_to.
    case DType::F16: bits = static_cast<__half_raw>(__double2half(value)).x; break;
    case DType::BF16: bits = static_cast<__nv_bfloat16_raw>(__double2bfloat16(value)).x; break;
    case DType::I64:
    case DType::U8: {
      const bool fits = y.dtype == DType::U8 ? fits_integer<uint8_t>(value) : fits_integer<int64_t>(value);
      DEMI_CHECK(fits, "fill: value ", value, " does not fit in ", y.dtype, " tensor ", y.shape,
                 "; fill an integer tensor with a finite value in its range");
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(&bits, &v, 8);  // little-endian: the low bytes are the uint8 value
      break;
    }
  }
  const int64_t n = y.numel();
  if (n == 0) return;
  const size_t width = dtype_size(y.dtype);
  const DeviceGuard guard(index_);
  // One repeated byte (zeros above all): a memset, no kernel.
  bool one_byte = true;
  for (size_t k = 1; k < width; ++k) one_byte = one_byte && ((bits >> (8 * k)) & 0xff) == (bits & 0xff);
  if (one_byte) {
    DEMI_CUDA_CHECK(cudaMemsetAsync(y.data, static_cast<int>(bits & 0xff), y.nbytes(), stream_));
    return;
  }
  const unsigned blocks = blocks_for(n, kThreads);
  switch (width) {
    case 2: fill_kernel<<<blocks, kThreads, 0, stream_>>>(y.as<uint16_t>(), static_cast<uint16_t>(bits), n); break;
    case 4: fill_kernel<<<blocks, kThreads, 0, stream_>>>(y.as<uint32_t>(), static_cast<uint32_t>(bits), n); break;
    default: fill_kernel<<<blocks, kThreads, 0, stream_>>>(y.as<uint64_t>(), bits, n); break;
  }
  DEMI_CUDA_LAUNCH_CHECK("fill_kernel");
}

// cast: x [any shape] of any dtype -> y of any dtype with x's numel, element by element. Into an
// integer dtype an element that does not fit (NaN, inf, out of range) throws, as on the CPU; that
// check costs one synchronisation, paid only by casts into integers.
void CudaKernels::cast_impl(const TensorRef& x, const TensorRef& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const DeviceGuard guard(index_);
  if (x.dtype == y.dtype) {
    if (x.data != y.data)
      DEMI_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  const unsigned blocks = blocks_for(n, kThreads);
  const bool checked = !is_floating(y.dtype) && x.dtype != DType::U8;  // uint8 fits in int64
  if (checked) DEMI_CUDA_CHECK(cudaMemsetAsync(report_, 0xff, sizeof(*report_), stream_));
  dispatch_all(x.dtype, "cast", [&](auto from) {
    using From = typename decltype(from)::type;
    dispatch_all(y.dtype, "cast", [&](auto to) {
      using To = typename decltype(to)::type;
      if constexpr (std::is_same_v<From, To>) {
        DEMI_INTERNAL_CHECK(false, "cast: same dtype ", x.dtype, " reached the kernel dispatch");
      } else if constexpr (std::is_integral_v<To> && !std::is_same_v<From, uint8_t>) {
        cast_to_integer_kernel<To, From><<<blocks, kThreads, 0, stream_>>>(x.as<const From>(), y.as<To>(), n, report_);
        DEMI_CUDA_LAUNCH_CHECK("cast_to_integer_kernel");
      } else {
        cast_kernel<To, From><<<blocks, kThreads, 0, stream_>>>(x.as<const From>(), y.as<To>(), n);
        DEMI_CUDA_LAUNCH_CHECK("cast_kernel");
      }
    });
  });
  if (!checked) return;
  note_host_read("cast's range check");
  unsigned long long first_bad = 0;
  DEMI_CUDA_CHECK(cudaMemcpyAsync(&first_bad, report_, sizeof(first_bad), cudaMemcpyDeviceToHost, stream_));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (first_bad == ~0ull) return;
  const int64_t bad = static_cast<int64_t>(first_bad);
  uint64_t raw = 0;  // the offending element's bits, to show its value
  const size_t width = dtype_size(x.dtype);
  DEMI_CUDA_CHECK(cudaMemcpyAsync(&raw, static_cast<const char*>(x.data) + bad * static_cast<int64_t>(width),
                                  width, cudaMemcpyDeviceToHost, stream_));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  DEMI_THROW("cast: element ", bad, " of ", x.dtype, " tensor ", x.shape, " is ", host_value(x.dtype, raw),
             ", which does not fit in ", y.dtype,
             y.dtype == DType::U8 ? " (range [0, 255])" : " (range [-2^63, 2^63))",
             "; clamp or mask the values before casting");
}

// unary: x [any shape] -> y of x's numel and dtype (floating), y = op(x; alpha, beta).
void CudaKernels::unary_impl(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) {
  const char* op = unary_name(kind);
  const int64_t n = x.numel();
  dispatch_floating(x.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n == 0) return;
    const DeviceGuard guard(index_);
    unary_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
        kind, x.as<const T>(), y.as<T>(), n, static_cast<acc_t<T>>(alpha), static_cast<acc_t<T>>(beta));
    DEMI_CUDA_LAUNCH_CHECK("unary_kernel");
  });
}

// binary: a and b broadcast (numpy rules) to y's shape, which may be larger than their own
// broadcast shape; a, b and y share a floating dtype. Same-shape operands take a flat loop.
void CudaKernels::binary_impl(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const char* op = binary_name(kind);
  const std::vector<int64_t> strides[2] = {broadcast_strides(a.shape, y.shape, op, "a"),
                                           broadcast_strides(b.shape, y.shape, op, "b")};
  const int64_t n = y.numel();
  dispatch_floating(y.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n == 0) return;
    const DeviceGuard guard(index_);
    const unsigned blocks = blocks_for(n, kThreads);
    if (a.numel() == n && b.numel() == n) {  // both already have y's layout
      binary_kernel<T><<<blocks, kThreads, 0, stream_>>>(kind, a.as<const T>(), b.as<const T>(), y.as<T>(), n);
      DEMI_CUDA_LAUNCH_CHECK("binary_kernel");
    } else if (n < (int64_t{1} << 31)) {
      // Built before the launch: a throw between <<<>>> and the call would strand its configuration.
      const BroadcastIndex<uint32_t, 2> ix = coalesce<uint32_t, 2>(y.shape, strides, op);
      binary_broadcast_kernel<T, uint32_t><<<blocks, kThreads, 0, stream_>>>(
          kind, a.as<const T>(), b.as<const T>(), y.as<T>(), static_cast<uint32_t>(n), ix);
      DEMI_CUDA_LAUNCH_CHECK("binary_broadcast_kernel");
    } else {
      const BroadcastIndex<int64_t, 2> ix = coalesce<int64_t, 2>(y.shape, strides, op);
      binary_broadcast_kernel<T, int64_t><<<blocks, kThreads, 0, stream_>>>(
          kind, a.as<const T>(), b.as<const T>(), y.as<T>(), n, ix);
      DEMI_CUDA_LAUNCH_CHECK("binary_broadcast_kernel");
    }
  });
}

}  // namespace demi::backend::cuda

namespace demi::backend::cuda {

namespace {

template <typename Bits>
void launch_where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y,
                  const std::vector<int64_t> (&strides)[3], unsigned blocks, cudaStream_t stream) {
  const int64_t n = y.numel();
  // Each index plan built before its launch: a throw between <<<>>> and the call would strand it.
  if (n < (int64_t{1} << 31)) {
    const BroadcastIndex<uint32_t, 3> ix = coalesce<uint32_t, 3>(y.shape, strides, "where");
    where_kernel<Bits, uint32_t><<<blocks, kThreads, 0, stream>>>(
        cond.as<const uint8_t>(), a.as<const Bits>(), b.as<const Bits>(), y.as<Bits>(), static_cast<uint32_t>(n), ix);
  } else {
    const BroadcastIndex<int64_t, 3> ix = coalesce<int64_t, 3>(y.shape, strides, "where");
    where_kernel<Bits, int64_t><<<blocks, kThreads, 0, stream>>>(
        cond.as<const uint8_t>(), a.as<const Bits>(), b.as<const Bits>(), y.as<Bits>(), n, ix);
  }
  DEMI_CUDA_LAUNCH_CHECK("where_kernel");
}

}  // namespace

// where: cond (uint8), a and b broadcast to y's shape; a, b and y share any dtype, copied by width.
void CudaKernels::where_impl(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const std::vector<int64_t> strides[3] = {broadcast_strides(cond.shape, y.shape, "where", "cond"),
                                           broadcast_strides(a.shape, y.shape, "where", "a"),
                                           broadcast_strides(b.shape, y.shape, "where", "b")};
  const int64_t n = y.numel();
  if (n == 0) return;
  const DeviceGuard guard(index_);
  const unsigned blocks = blocks_for(n, kThreads);
  switch (dtype_size(y.dtype)) {
    case 1: return launch_where<uint8_t>(cond, a, b, y, strides, blocks, stream_);
    case 2: return launch_where<uint16_t>(cond, a, b, y, strides, blocks, stream_);
    case 4: return launch_where<uint32_t>(cond, a, b, y, strides, blocks, stream_);
    case 8: return launch_where<unsigned long long>(cond, a, b, y, strides, blocks, stream_);
  }
  DEMI_THROW("where: no kernel for ", dtype_size(y.dtype), "-byte elements (", y.dtype, ")");
}

}  // namespace demi::backend::cuda

// Device-side scalar plumbing shared by the CUDA backend's .cu files: dtype dispatch to device
// types, the fp32/fp64/int64 type a stored value is computed in, the one rounding back into a
// storage type, precise libdevice math by overload, and products and sums kept out of FMAs.
// Included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace demi::backend::cuda {

template <typename T> struct Tag { using type = T; };

// Calls fn(Tag<T>{}) with T the device type of a floating dtype; throws for the others.
template <typename Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(Tag<float>{}); return;
    case DType::F64: fn(Tag<double>{}); return;
    case DType::F16: fn(Tag<__half>{}); return;
    case DType::BF16: fn(Tag<__nv_bfloat16>{}); return;
    default:
      DEMI_THROW(op, ": the CUDA backend computes float32, float64, float16 and bfloat16 here, got ",
                 dtype, "; cast the operands first");
  }
}

// Calls fn(Tag<T>{}) for every dtype.
template <typename Fn>
void dispatch_all(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::I64: fn(Tag<int64_t>{}); return;
    case DType::U8: fn(Tag<uint8_t>{}); return;
    default: dispatch_floating(dtype, op, fn);
  }
}

// The type a stored value is read into: fp32 for the half types (it holds them exactly and
// arithmetic happens there), int64 for the integers, else the type itself.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<uint8_t> { using type = int64_t; };
template <typename T> using acc_t = typename Acc<T>::type;

__device__ inline float widen(float v) { return v; }
__device__ inline double widen(double v) { return v; }
__device__ inline float widen(__half v) { return __half2float(v); }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline int64_t widen(int64_t v) { return v; }
__device__ inline int64_t widen(uint8_t v) { return v; }

// Narrow<To>::from(w): the one rounding into a floating storage type, round-to-nearest-even. A
// double or int64 goes to fp16 / bf16 directly, never through fp32 (which would round twice), as
// the CPU backend's round_to does. Integer targets go through the checked cast below instead.
template <typename To> struct Narrow {
  template <typename W> __device__ static To from(W w) { return static_cast<To>(w); }
};
template <> struct Narrow<__half> {
  __device__ static __half from(float w) { return __float2half_rn(w); }
  __device__ static __half from(double w) { return __double2half(w); }
  __device__ static __half from(int64_t w) { return __double2half(static_cast<double>(w)); }
};
template <> struct Narrow<__nv_bfloat16> {
  __device__ static __nv_bfloat16 from(float w) { return __float2bfloat16_rn(w); }
  __device__ static __nv_bfloat16 from(double w) { return __double2bfloat16(w); }
  __device__ static __nv_bfloat16 from(int64_t w) { return __double2bfloat16(static_cast<double>(w)); }
};

// Whether v, truncated toward zero (as C++ and PyTorch do), is a value of integer type I. False
// for NaN and inf. The same test as the CPU backend's, so both refuse the same elements.
template <typename I> __host__ __device__ inline bool fits_integer(double v) {
  if constexpr (std::is_same_v<I, uint8_t>) return v > -1.0 && v < 256.0;
  else return v >= -0x1p63 && v < 0x1p63;
}

// Precise libdevice math in fp32 or fp64 by overload (no fast-math: parity with the CPU matters).
namespace dmath {
__device__ inline float exp(float v) { return ::expf(v); }
__device__ inline double exp(double v) { return ::exp(v); }
__device__ inline float log(float v) { return ::logf(v); }
__device__ inline double log(double v) { return ::log(v); }
__device__ inline float sqrt(float v) { return ::sqrtf(v); }
__device__ inline double sqrt(double v) { return ::sqrt(v); }
__device__ inline float erf(float v) { return ::erff(v); }
__device__ inline double erf(double v) { return ::erf(v); }
__device__ inline float pow(float v, float p) { return ::powf(v, p); }
__device__ inline double pow(double v, double p) { return ::pow(v, p); }
// x^p as PyTorch computes it: products, square roots and reciprocals for the exponents 2, 3, 0.5,
// -0.5, -1 and -2 (pow(-inf, 0.5) is NaN, as sqrt(-inf)), pow() for the others.
template <typename A>
__device__ inline A pow_scalar(A x, A p) {
  if (p == A(2)) return x * x;
  if (p == A(3)) return x * x * x;
  if (p == A(0.5)) return sqrt(x);
  if (p == A(-0.5)) return A(1) / sqrt(x);
  if (p == A(-1)) return A(1) / x;
  if (p == A(-2)) return A(1) / (x * x);
  return pow(x, p);
}
// alpha * x + beta rounded twice, never contracted into an FMA: the CPU's (Eigen, ISO C++ with
// -ffp-contract=off) arithmetic, so that scalar scaling matches bit for bit.
__device__ inline float affine(float x, float alpha, float beta) { return __fadd_rn(__fmul_rn(alpha, x), beta); }
__device__ inline double affine(double x, double alpha, double beta) { return __dadd_rn(__dmul_rn(alpha, x), beta); }
}  // namespace dmath

// a * b and a + b (fp32 or fp64) rounded on their own, never contracted into an FMA with a
// neighbouring operation: the CPU's arithmetic (ISO C++, -ffp-contract=off). Host-callable too, so
// that per-element bodies can be emulated on the host against the CPU backend.
template <typename A>
__host__ __device__ inline A mul_rn(A a, A b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <typename A>
__host__ __device__ inline A add_rn(A a, A b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<A, float>) return __fadd_rn(a, b);
  else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// The index of this thread in a 1-D grid and the grid's width: for grid-stride loops
//   for (int64_t i = thread_index(); i < n; i += grid_width()) ...
__device__ inline int64_t thread_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_width() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace demi::backend::cuda

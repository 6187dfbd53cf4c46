// Helpers shared by the CPU kernel files: dtype dispatch, half <-> fp32 loads and stores, and the
// OpenMP parallel loop. Internal to backends/cpu.
#pragma once

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/isa/isa.h"
#include "backends/kernels.h"
#include "backends/stochastic_rounding.h"

namespace demi::backend::cpu {

// Storage types of each DType inside the CPU backend. Eigen::half / Eigen::bfloat16 have the same
// bits as demi::Half / demi::BFloat16.
template <DType D> struct CType;
template <> struct CType<DType::F32> { using type = float; };
template <> struct CType<DType::F64> { using type = double; };
template <> struct CType<DType::F16> { using type = Eigen::half; };
template <> struct CType<DType::BF16> { using type = Eigen::bfloat16; };
template <> struct CType<DType::I64> { using type = int64_t; };
template <> struct CType<DType::U8> { using type = uint8_t; };

// The type arithmetic on T is done in: fp32 for the half types (one rounding on store), else T.
template <typename T> struct AccType { using type = T; };
template <> struct AccType<Eigen::half> { using type = float; };
template <> struct AccType<Eigen::bfloat16> { using type = float; };
template <typename T> using acc_t = typename AccType<T>::type;

// exp of an Eigen array expression, right below the normal range. Eigen 3.4's vectorised exp
// clamps x at about -88.7 (fp32), so every smaller x gave 2.9e-39 rather than its subnormal or 0
// (exp(-inf) too). There exp(x) is exp(x / 2) squared: each half is in range, and the square rounds
// into the subnormals (or to 0) once. Both sides are computed: twice Eigen's cost.
template <typename Derived>
auto exp_to_subnormals(const Eigen::ArrayBase<Derived>& v) {
  using C = typename Derived::Scalar;
  const C normal_min = std::log(std::numeric_limits<C>::min());
  return (v < normal_min).select((v * C(0.5)).exp().square(), v.exp());
}

// The +infinity bits of a half type (fp16 0x7c00, bf16 0x7f80); a larger magnitude is a NaN. For
// kernels that work on the bits (ReLU, max pooling).
template <typename T>
constexpr uint16_t kHalfInfBits = std::is_same_v<T, Eigen::half> ? 0x7c00 : 0x7f80;

// Calls fn(T{}) with T the C++ type of a floating dtype; throws for other dtypes.
template <typename Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    case DType::F16: fn(Eigen::half{}); return;
    case DType::BF16: fn(Eigen::bfloat16{}); return;
    default: DEMI_THROW(op, ": the CPU backend supports float32, float64, float16 and bfloat16, got ", dtype);
  }
}

// Calls fn(T{}) for every dtype.
template <typename Fn>
void dispatch_all(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::I64: fn(int64_t{}); return;
    case DType::U8: fn(uint8_t{}); return;
    default: dispatch_floating(dtype, op, fn);
  }
}

// Runs body(begin, end) over [0, n) split across the CPU backend's threads; serially when the work
// (n * cost_per_item) is too small to pay for waking threads.
template <typename Body>
void parallel_for(int64_t n, int64_t cost_per_item, Body&& body) {
  const int64_t work = n * cost_per_item;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || work < 32768 || n < 2) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, t * chunk);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

// dst[0, n) = src[0, n) for rows of at most 128 bytes in a few fixed-size moves (the last one
// overlapping the one before), without the call to memmove that std::copy makes for each row
// (with no loop, GCC does not turn it back into one); longer rows go to memcpy. For the many
// short rows of max pooling's gathered windows, im2col's taps and batch norm's small planes.
template <typename T>
inline void copy_short(const T* src, int64_t n, T* dst) {
  static_assert(std::is_trivially_copyable_v<T>, "copy_short moves bytes");
  const char* s = reinterpret_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (bytes > 128) {
    std::memcpy(d, s, static_cast<size_t>(bytes));
  } else if (bytes >= 16) {
#pragma GCC unroll 7
    for (int64_t k = 16; k < 128; k += 16) {  // a fixed count: not a copy loop to GCC
      if (k < bytes) std::memcpy(d + k - 16, s + k - 16, 16);
    }
    std::memcpy(d + bytes - 16, s + bytes - 16, 16);
  } else if (bytes >= 8) {
    std::memcpy(d, s, 8);
    std::memcpy(d + bytes - 8, s + bytes - 8, 8);
  } else if (bytes >= 4) {
    std::memcpy(d, s, 4);
    std::memcpy(d + bytes - 4, s + bytes - 4, 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// Converts n elements From -> To; a half destination is rounded once, to nearest even (NaN stays
// NaN, fp16 overflows to inf). half <-> fp32 go through the ISA level's vector conversions
// (isa/convert_<isa>.cpp), because Eigen 3.4's cast<>() runs those element by element; other pairs
// go through Eigen.
template <typename From, typename To>
void convert_n(const From* src, To* dst, int64_t n) {
  if (n <= 0) return;
  if constexpr (std::is_same_v<From, Eigen::half> && std::is_same_v<To, float>) {
    isa::active().convert.f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
  } else if constexpr (std::is_same_v<From, Eigen::bfloat16> && std::is_same_v<To, float>) {
    isa::active().convert.bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Eigen::half>) {
    isa::active().convert.f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Eigen::bfloat16>) {
    isa::active().convert.f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n);
  } else if constexpr (std::is_same_v<From, To>) {
    copy_short(src, n, dst);  // Eigen's cast<>() of bfloat16 to itself goes through float
  } else {
    Eigen::Map<Eigen::Array<To, Eigen::Dynamic, 1>>(dst, n) =
        Eigen::Map<const Eigen::Array<From, Eigen::Dynamic, 1>>(src, n).template cast<To>();
  }
}

// Per-thread scratch memory that grows and is never given back, so that kernels in a training
// loop stop allocating after the first step. Slot `slot` of the calling thread stays valid until
// that thread asks for the same slot again; a kernel owns its slots only while it runs. OpenMP
// thread 0 is the calling thread: use different slots outside and inside a parallel region.
inline void* thread_scratch_bytes(int slot, size_t bytes) {
  constexpr int kSlots = 12;
  struct Buffers {
    void* ptr[kSlots] = {};
    size_t size[kSlots] = {};
    ~Buffers() {
      for (void* p : ptr) std::free(p);
    }
  };
  static thread_local Buffers buffers;
  DEMI_INTERNAL_CHECK(slot >= 0 && slot < kSlots, "thread_scratch: slot ", slot, " out of range");
  if (buffers.size[slot] < bytes) {
    std::free(buffers.ptr[slot]);
    const size_t rounded = (bytes + 63) / 64 * 64;
    buffers.ptr[slot] = std::aligned_alloc(64, rounded);
    buffers.size[slot] = buffers.ptr[slot] ? rounded : 0;
    DEMI_CHECK(buffers.ptr[slot] != nullptr, "CPU backend: out of memory allocating ", bytes,
               " bytes of scratch; reduce the batch size");
  }
  return buffers.ptr[slot];
}
template <typename T>
T* thread_scratch(int slot, int64_t n) {
  return static_cast<T*>(thread_scratch_bytes(slot, static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)));
}

}  // namespace demi::backend::cpu

#include <cmath>
#include <cstring>
#include <type_traits>

namespace demi::backend::cpu {

// Sum of n fp32 values in double, in 32 independent lanes that the compiler vectorises: eight vectors
// of four doubles, so that eight additions are in flight (Eigen's cast<double>().sum() goes element
// by element, 5x slower; eight lanes, two additions in flight, took 8% of AirNet's bf16
// backward-weight for the bias sums).
inline double sum_double(const float* x, int64_t n) {
  constexpr int kLanes = 32;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(x[i + j]);
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {  // pairwise: lane j += lane j + width
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  double sum = lane[0];
  for (; i < n; ++i) sum += static_cast<double>(x[i]);
  return sum;
}
inline double sum_double(const double* x, int64_t n) {
  return Eigen::Map<const Eigen::Array<double, Eigen::Dynamic, 1>>(x, n).sum();
}
// The same for half values, widened (exactly) to fp32 a block at a time.
template <typename Half>
double sum_double(const Half* x, int64_t n) {
  static_assert(std::is_same_v<Half, Eigen::half> || std::is_same_v<Half, Eigen::bfloat16>);
  float block[256];
  double sum = 0.0;
  for (int64_t i = 0; i < n; i += 256) {
    const int64_t len = std::min<int64_t>(256, n - i);
    convert_n(x + i, block, len);
    sum += sum_double(block, len);
  }
  return sum;
}

// double -> T rounded once, to nearest even. Eigen's half(double) goes through float and can round
// twice (1 + 2^-11 + 2^-40 -> float 1 + 2^-11 -> half tie -> 1.0, where once gives 1 + 2^-10);
// rounding to float by round-to-odd first makes the final rounding exact, matching
// __double2half / __double2bfloat16 on the GPU.
template <typename T>
inline T round_to(double v) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    float f = static_cast<float>(v);
    if (std::isfinite(v) && static_cast<double>(f) != v) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --bits;  // truncate toward zero
      bits |= 1u;                                                      // sticky bit: inexact
      std::memcpy(&f, &bits, 4);
    }
    return T(f);
  } else {
    return static_cast<T>(v);
  }
}

// An optimizer's new value p of element i written into a param of type T: rounded once to nearest,
// or, for the half types under Rounding::Stochastic, stochastically (backends/stochastic_rounding.h).
template <typename T, typename C>
inline void store_param(T* param, int64_t i, C p, const WriteRounding& r) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    if (r.mode == Rounding::Stochastic) {
      constexpr auto format = std::is_same_v<T, Eigen::half> ? rounding::HalfFormat::F16 : rounding::HalfFormat::BF16;
      const uint16_t bits = rounding::float_to_half_stochastic(static_cast<float>(p), format,
                                                               rounding::rounding_uniform(r.seed, r.offset, i));
      param[i] = Eigen::numext::bit_cast<T>(bits);
      return;
    }
  }
  param[i] = T(p);
}

// Whether an optimizer's found_inf (optional, one-element F32) asks it to skip the step.
inline bool found_inf_set(const TensorRef& found_inf) {
  return found_inf.defined() && *found_inf.as<float>() != 0.0f;
}

// An optimizer's arguments (SgdArgs, AdamWArgs) with their lr_tensor, host memory on the CPU, read
// into lr: the step then runs the one path that takes the rate by value.
template <typename Args>
Args with_host_lr(Args args) {
  if (args.lr_tensor.defined()) {
    args.lr = *args.lr_tensor.template as<const double>();
    args.lr_tensor = TensorRef();
  }
  return args;
}

}  // namespace demi::backend::cpu

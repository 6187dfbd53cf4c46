// Shared by the tests of the CUDA backend (tests/backends/cuda): a host model of the dtypes (encode a
// double into a dtype's bytes with one rounding, decode them back), the tolerance table, device
// buffers and the two backends. Each test compares a CUDA kernel with hand values or with the CPU
// backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "framework/core/half.h"
#include "support/tolerance.h"

namespace demi::backend::cuda_test {

inline constexpr const char* kNoDevice = "no CUDA device (cuda_device_count() == 0)";

// The one tolerance table and comparison of every kernel test (support/tolerance.h). Most CUDA
// results are checked at device_math(dtype): the device computes in fp32 (or fp64) with libdevice's
// few-ulp functions, the reference in double, each rounded once.
using test::accumulated;
using test::device_math;
using test::epsilon;
using test::expect_close;
using test::kExact;
using test::normalized;
using test::rounded;
using test::Tolerance;

// --- Host model of the dtypes: storing a double rounds once (floating) or truncates (integers) ---

// v rounded to float with round-to-odd: float -> half then rounds once, correctly, from the double.
inline float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(v) && static_cast<double>(f) != v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --bits;
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

inline std::vector<uint8_t> encode(const std::vector<double>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = bytes.data() + i * dtype_size(dtype);
    const double v = values[i];
    switch (dtype) {
      case DType::F32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::F64: std::memcpy(p, &v, 8); break;
      case DType::F16: { const uint16_t b = Half(round_to_odd(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::BF16: { const uint16_t b = BFloat16(round_to_odd(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::I64: { const int64_t n = static_cast<int64_t>(v); std::memcpy(p, &n, 8); break; }
      case DType::U8: *p = static_cast<uint8_t>(v); break;
    }
  }
  return bytes;
}

inline std::vector<double> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); values[i] = f; break; }
      case DType::F64: std::memcpy(&values[i], p, 8); break;
      case DType::F16: { uint16_t b; std::memcpy(&b, p, 2); values[i] = Half::from_bits(b); break; }
      case DType::BF16: { uint16_t b; std::memcpy(&b, p, 2); values[i] = BFloat16::from_bits(b); break; }
      case DType::I64: { int64_t n; std::memcpy(&n, p, 8); values[i] = static_cast<double>(n); break; }
      case DType::U8: values[i] = *p; break;
    }
  }
  return values;
}

// Exact comparison of stored bytes, reporting the first few differing elements by value. A NaN
// matches any NaN: its payload and sign are no part of any result (the GPU writes the canonical
// 0x7fffffff where the CPU's x86 arithmetic keeps the input's payload or writes 0xffc00000).
inline void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t width = dtype_size(dtype);
  const std::vector<double> g = decode(got, dtype), w = decode(want, dtype);
  int reported = 0;
  for (size_t i = 0; i < g.size() && reported < 5; ++i) {
    if (std::memcmp(got.data() + i * width, want.data() + i * width, width) == 0) continue;
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i];
    ++reported;
  }
}

// --- Device buffers ------------------------------------------------------------------------------

// A raw allocation on a backend, freed on scope exit.
class Buffer {
 public:
  Buffer(Kernels& k, const std::vector<uint8_t>& host) : k_(k), bytes_(host.size()) {
    ptr_ = k_.raw_allocate(bytes_);
    k_.copy_from_host(host.data(), ptr_, bytes_);
  }
  Buffer(Kernels& k, size_t bytes) : k_(k), bytes_(bytes) { ptr_ = k_.raw_allocate(bytes_); }
  ~Buffer() { k_.raw_free(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  TensorRef ref(const Shape& shape, DType dtype) const { return TensorRef{ptr_, shape, dtype}; }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> host(bytes_);
    k_.copy_to_host(ptr_, host.data(), bytes_);
    return host;
  }
  void* data() const { return ptr_; }

 private:
  Kernels& k_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

inline Kernels& gpu() { return kernels_for(Device::cuda(0)); }

// Why a test of `family` cannot run on cuda:0 (no device, or a library this build lacks), or "".
inline std::string gpu_lacks(KernelFamily family) {
  if (cuda_device_count() == 0) return kNoDevice;
  if (!gpu().supports(family)) return "this build's CUDA backend does not support the kernel family (cuDNN not found)";
  return "";
}
inline Kernels& cpu() { return kernels_for(Device::cpu()); }

inline const std::vector<DType> kAllDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8};
inline const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

inline std::vector<double> uniform(size_t n, double lo, double hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

}  // namespace demi::backend::cuda_test

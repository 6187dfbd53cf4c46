// HostTensor, shared by the CPU kernel tests: host storage behind a TensorRef with values in and
// out as double, and expect_close for it (the tolerance table is support/tolerance.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "support/tolerance.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

// 64-byte aligned storage, as the CPU backend allocates it: where a kernel's result depends on
// alignment (Eigen's vectorised sums start at the first aligned packet), tests see the framework's.
template <typename T>
struct Aligned64Allocator {
  using value_type = T;
  Aligned64Allocator() = default;
  template <typename U> Aligned64Allocator(const Aligned64Allocator<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U> bool operator==(const Aligned64Allocator<U>&) const { return true; }
  template <typename U> bool operator!=(const Aligned64Allocator<U>&) const { return false; }
};

// Host storage behind a TensorRef, in any dtype; values go in and out as double, through
// demi::Half and demi::BFloat16 (an implementation independent of the backend's Eigen
// conversions), so references are computed from the very values the kernel sees.
struct HostTensor {
  DType dtype;
  Shape shape;
  std::vector<double, Aligned64Allocator<double>> storage;

  HostTensor(DType d, Shape s)
      : dtype(d), shape(std::move(s)), storage(static_cast<size_t>(demi::shape_numel(shape)) * demi::dtype_size(d) / 8 + 1) {}
  HostTensor(Shape s, DType d) : HostTensor(d, std::move(s)) {}
  TensorRef ref() { return TensorRef{storage.data(), shape, dtype}; }
  int64_t numel() const { return demi::shape_numel(shape); }
  void set(int64_t i, double v) {
    void* p = storage.data();
    switch (dtype) {
      case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::F64: static_cast<double*>(p)[i] = v; break;
      case DType::F16: static_cast<demi::Half*>(p)[i] = demi::Half(static_cast<float>(v)); break;
      case DType::BF16: static_cast<demi::BFloat16*>(p)[i] = demi::BFloat16(static_cast<float>(v)); break;
      case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    }
  }
  double get(int64_t i) const {
    const void* p = storage.data();
    switch (dtype) {
      case DType::F32: return static_cast<const float*>(p)[i];
      case DType::F64: return static_cast<const double*>(p)[i];
      case DType::F16: return static_cast<float>(static_cast<const demi::Half*>(p)[i]);
      case DType::BF16: return static_cast<float>(static_cast<const demi::BFloat16*>(p)[i]);
      case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case DType::U8: return static_cast<const uint8_t*>(p)[i];
    }
    return 0.0;
  }
  void fill(double v) {
    for (int64_t i = 0; i < numel(); ++i) set(i, v);
  }
  // Uniform values in [lo, hi), rounded to the dtype.
  void fill_random(std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
  }
  // The stored values, in order.
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[static_cast<size_t>(i)] = get(i);
    return v;
  }
  // fill_random, returning the stored values.
  std::vector<double> randomize(std::mt19937& rng, double lo, double hi) {
    fill_random(rng, lo, hi);
    return values();
  }
};

using demi::test::accumulated;
using demi::test::kExact;
using demi::test::normalized;
using demi::test::rounded;
using demi::test::Tolerance;

// The one comparison (support/tolerance.h) for a kernel's output.
inline void expect_close(const HostTensor& got, const std::vector<double>& want, Tolerance tol,
                         const std::string& what = "") {
  demi::test::expect_close(got.values(), want, tol, what);
}

[[maybe_unused]] const DType kFloating[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

}  // namespace

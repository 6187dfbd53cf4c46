// How close a kernel's result must be to its reference, for every kernel test, CPU and CUDA: one
// rule (Tolerance), one table (the functions below) and one expect_close.
//
// The reference is computed in double from the very values the kernel read. A result stored in a
// dtype differs from it by its own rounding plus whatever the computation added; each row of the
// table names one such computation, each column is the result's dtype:
//
//   row                          F64                     F32                    F16 / BF16
//   rounded(d)                   1e-13, 1e-14            1e-6, 1e-7             eps, 1e-7
//   accumulated(d, n)            1e-12, 1e-13 sqrt(n)    1e-5, 1e-6 sqrt(n)     eps, 1e-6 sqrt(n)
//   normalized(d)                1e-12, 1e-12            1e-5, 1e-5             eps, 1e-5
//   device_math(d)               4 eps, 4 eps            4 eps, 4 eps           4 eps, 4 eps
//
// (rtol, atol), with eps = epsilon(d): 2^-52, 2^-23, 2^-10, 2^-7. rounded: element-wise math,
// softmax, losses, reductions, pooling and optimizer steps: a few fp32 or fp64 roundings.
// accumulated: sums of n products in an fp32 or fp64 accumulator (GEMM, convolution), whose error
// grows like sqrt(n). normalized: BatchNorm's outputs and gradients, where subtracting the batch
// mean cancels terms of the input's magnitude and the gradients cancel sums over the batch, so the
// error is absolute, set by the terms rather than the (small) result. device_math: CUDA's libdevice
// functions (a few ulps each) on O(1) inputs, where cancelling terms leave an error of a few
// ulps of the terms, not of the small result, hence atol = rtol. A test that needs another bound
// derives it from a row and says why beside it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/dtype.h"

namespace demi::test {

// |got - want| <= atol + rtol * |want| for finite values; NaN matches NaN, an infinity only
// itself (the bound at an infinite reference is infinite, and would accept any finite value).
struct Tolerance {
  double rtol = 0.0, atol = 0.0;

  double bound(double want) const { return atol + rtol * std::fabs(want); }
  bool accepts(double got, double want) const {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
    if (std::isinf(got) || std::isinf(want)) return got == want;
    return std::fabs(got - want) <= bound(want);
  }
};

// Bit-for-bit (copies, permutes, max pooling, comparisons).
inline constexpr Tolerance kExact{0.0, 0.0};

// The spacing of the dtype's numbers at 1: 2^-52, 2^-23, 2^-10, 2^-7 (0 for integers).
inline double epsilon(DType d) {
  switch (d) {
    case DType::F64: return 0x1p-52;
    case DType::F32: return 0x1p-23;
    case DType::F16: return 0x1p-10;
    case DType::BF16: return 0x1p-7;
    default: return 0.0;
  }
}

// A few fp32 / fp64 roundings, then one into the result's dtype.
inline Tolerance rounded(DType d) {
  switch (d) {
    case DType::F64: return {1e-13, 1e-14};
    case DType::F32: return {1e-6, 1e-7};
    case DType::F16:
    case DType::BF16: return {epsilon(d), 1e-7};
    default: return kExact;
  }
}

// A sum of `terms` products accumulated in fp32 (fp64 for an F64 result), rounded into the result.
inline Tolerance accumulated(DType d, int64_t terms) {
  const double s = std::sqrt(static_cast<double>(std::max<int64_t>(terms, 1)));
  switch (d) {
    case DType::F64: return {1e-12, 1e-13 * s};
    case DType::F32: return {1e-5, 1e-6 * s};
    case DType::F16:
    case DType::BF16: return {epsilon(d), 1e-6 * s};
    default: return kExact;
  }
}

// BatchNorm's normalised outputs and their gradients.
inline Tolerance normalized(DType d) {
  switch (d) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {1e-5, 1e-5};
    case DType::F16:
    case DType::BF16: return {epsilon(d), 1e-5};
    default: return kExact;
  }
}

// CUDA's device math: libdevice's few-ulp functions on O(1) inputs.
inline Tolerance device_math(DType d) { return {4 * epsilon(d), 4 * epsilon(d)}; }

// Checks element i of got against want[i] within tol[i], naming `what` and the first few
// mismatches. One bound per element is for a result whose error is relative to something besides
// |want| (the magnitude of the terms a sum cancelled); most tests pass one Tolerance for all.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<Tolerance>& tol, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(tol.size(), want.size()) << what;
  const std::string prefix = what.empty() ? "" : what + ": ";
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (tol[i].accepts(got[i], want[i])) continue;
    if (++failures <= 5) {
      ADD_FAILURE() << prefix << "element " << i << " is " << got[i] << ", want " << want[i] << " (bound "
                    << tol[i].bound(want[i]) << ")";
    }
  }
  EXPECT_EQ(failures, 0) << prefix << failures << " of " << got.size() << " elements out of tolerance";
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol,
                         const std::string& what = "") {
  expect_close(got, want, std::vector<Tolerance>(want.size(), tol), what);
}

}  // namespace demi::test

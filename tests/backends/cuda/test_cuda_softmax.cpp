// Pins backends/cuda/softmax.cu: softmax and log-softmax, forward and backward, on cuda:0 against the
// CPU backend for rows on the warp path (1, 10, 1000) and the block path (5000), large logits,
// every floating dtype, in-place use, empty tensors and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

const SoftmaxKind kKinds[] = {SoftmaxKind::Softmax, SoftmaxKind::LogSoftmax};

std::string kind_name(SoftmaxKind k) { return k == SoftmaxKind::Softmax ? "softmax" : "log_softmax"; }

int64_t row_length(const Shape& s) { return s.empty() ? 1 : s.back(); }

// |got - want| <= t (1 + |want|), Tolerance{t, t}, with t = device_math(dtype).rtol plus, for F64,
// the summation-order term K * 2^-52: both backends sum a row in double, in different orders,
// which is below fp32's resolution but not F64's.
Tolerance row_tolerance(DType dtype, int64_t K) {
  const double summation = dtype == DType::F64 ? static_cast<double>(K) * epsilon(DType::F64) : 0.0;
  const double t = device_math(dtype).rtol + summation;
  return {t, t};
}

// The same, widened at element i by t scale[i], Tolerance{t, t (1 + scale[i])}: scale is the
// magnitude of the terms that cancel into the result, whose error is a few ulps of the terms, not
// of the small result.
std::vector<Tolerance> row_tolerance(DType dtype, int64_t K, const std::vector<double>& scale) {
  const double t = row_tolerance(dtype, K).rtol;
  std::vector<Tolerance> tol;
  for (const double s : scale) tol.push_back({t, t * (1 + s)});
  return tol;
}

std::vector<uint8_t> cpu_forward(SoftmaxKind kind, const std::vector<uint8_t>& x, const Shape& shape, DType dtype) {
  std::vector<uint8_t> y(x.size());
  cpu().softmax_forward(kind, TensorRef{const_cast<uint8_t*>(x.data()), shape, dtype}, TensorRef{y.data(), shape, dtype});
  return y;
}

std::vector<uint8_t> gpu_forward(SoftmaxKind kind, const std::vector<uint8_t>& x, const Shape& shape, DType dtype) {
  const Buffer dx(gpu(), x);
  Buffer dy(gpu(), x.size());
  gpu().softmax_forward(kind, dx.ref(shape, dtype), dy.ref(shape, dtype));
  return dy.read();
}

std::vector<uint8_t> cpu_backward(SoftmaxKind kind, const std::vector<uint8_t>& y, const std::vector<uint8_t>& gy,
                                  const Shape& shape, DType dtype) {
  std::vector<uint8_t> gx(y.size());
  cpu().softmax_backward(kind, TensorRef{const_cast<uint8_t*>(y.data()), shape, dtype},
                         TensorRef{const_cast<uint8_t*>(gy.data()), shape, dtype}, TensorRef{gx.data(), shape, dtype});
  return gx;
}

std::vector<uint8_t> gpu_backward(SoftmaxKind kind, const std::vector<uint8_t>& y, const std::vector<uint8_t>& gy,
                                  const Shape& shape, DType dtype) {
  const Buffer dy(gpu(), y), dgy(gpu(), gy);
  Buffer dgx(gpu(), y.size());
  gpu().softmax_backward(kind, dy.ref(shape, dtype), dgy.ref(shape, dtype), dgx.ref(shape, dtype));
  return dgx.read();
}

// The magnitude of the terms that cancel in each grad_x element: |y| (|gy| + |sum(gy y)|) for
// softmax, |gy| + exp(y) |sum(gy)| for log-softmax (in double, from the stored values).
std::vector<double> backward_terms(SoftmaxKind kind, const std::vector<double>& y, const std::vector<double>& gy,
                                   int64_t K) {
  std::vector<double> scale(y.size());
  for (size_t start = 0; start < y.size(); start += static_cast<size_t>(K)) {
    double total = 0.0;
    for (int64_t j = 0; j < K; ++j) total += kind == SoftmaxKind::Softmax ? gy[start + j] * y[start + j] : gy[start + j];
    for (int64_t j = 0; j < K; ++j) {
      const size_t i = start + static_cast<size_t>(j);
      scale[i] = kind == SoftmaxKind::Softmax ? std::fabs(y[i]) * (std::fabs(gy[i]) + std::fabs(total))
                                              : std::fabs(gy[i]) + std::exp(y[i]) * std::fabs(total);
    }
  }
  return scale;
}

struct SoftmaxCase {
  const char* name;
  Shape shape;
  double range;  // logits uniform in [-range, range]
};

TEST(CudaSoftmax, ForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<SoftmaxCase> cases = {
      {"rows of 1", {37, 1}, 4.0},
      {"rows of 10", {37, 10}, 4.0},
      {"rows of 1000 (warp per row)", {19, 1000}, 4.0},
      {"rows of 1025 (block per row)", {3, 1025}, 4.0},
      {"rows of 5000 (block per row)", {11, 5000}, 4.0},
      {"3-D, rows of 10", {2, 3, 10}, 4.0},
      {"one row", {1, 777}, 4.0},
      {"0-d", {}, 4.0},
      {"large logits, rows of 10", {37, 10}, 1e4},
      {"large logits, rows of 5000", {5, 5000}, 1e4},
  };
  unsigned seed = 1;
  for (const SoftmaxCase& c : cases) {
    const int64_t K = row_length(c.shape);
    const size_t n = static_cast<size_t>(shape_numel(c.shape));
    const std::vector<double> logits = uniform(n, -c.range, c.range, seed++);
    const std::vector<double> grads = uniform(n, -1.0, 1.0, seed++);
    for (const DType dtype : kFloatDTypes) {
      for (const SoftmaxKind kind : kKinds) {
        std::ostringstream name;
        name << kind_name(kind) << " " << c.name << " " << c.shape << " " << dtype;
        SCOPED_TRACE(name.str());
        const std::vector<uint8_t> x = encode(logits, dtype);
        const std::vector<uint8_t> want = cpu_forward(kind, x, c.shape, dtype);
        const std::vector<uint8_t> got = gpu_forward(kind, x, c.shape, dtype);
        expect_close(decode(got, dtype), decode(want, dtype), row_tolerance(dtype, K), name.str() + " forward");

        const std::vector<uint8_t> gy = encode(grads, dtype);
        const std::vector<double> terms = backward_terms(kind, decode(want, dtype), decode(gy, dtype), K);
        expect_close(decode(gpu_backward(kind, want, gy, c.shape, dtype), dtype),
                     decode(cpu_backward(kind, want, gy, c.shape, dtype), dtype), row_tolerance(dtype, K, terms),
                     name.str() + " backward");
      }
    }
  }
}

TEST(CudaSoftmax, LargeLogitsDoNotOverflow) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // exp(1e4) overflows fp32 and fp64; with the max subtracted every output is finite.
  const std::vector<double> logits = {1e4, 1e4 - 1, -1e4, 0.0, 1e4 - 2};
  for (const DType dtype : {DType::F32, DType::F64}) {
    for (const SoftmaxKind kind : kKinds) {
      SCOPED_TRACE(kind_name(kind) + " " + dtype_name(dtype));
      const std::vector<double> y = decode(gpu_forward(kind, encode(logits, dtype), {5}, dtype), dtype);
      std::vector<double> want(5);
      const double log_sum = std::log(1 + std::exp(-1.0) + std::exp(-2.0));  // of exp(x - max)
      for (size_t j = 0; j < 5; ++j) {
        want[j] = (logits[j] - 1e4) - log_sum;
        if (kind == SoftmaxKind::Softmax) want[j] = std::exp(want[j]);
      }
      for (double v : y) EXPECT_TRUE(std::isfinite(v)) << v;
      expect_close(y, want, row_tolerance(dtype, 5), "large logits");
    }
  }
}

TEST(CudaSoftmax, InPlaceMatchesOutOfPlace) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const Shape& shape : {Shape{13, 100}, Shape{3, 3000}}) {
    for (const SoftmaxKind kind : kKinds) {
      SCOPED_TRACE(kind_name(kind));
      const size_t n = static_cast<size_t>(shape_numel(shape));
      const std::vector<uint8_t> x = encode(uniform(n, -3, 3, 3), DType::F32);
      const std::vector<uint8_t> y = gpu_forward(kind, x, shape, DType::F32);
      const Buffer in_place(gpu(), x);
      gpu().softmax_forward(kind, in_place.ref(shape, DType::F32), in_place.ref(shape, DType::F32));
      EXPECT_EQ(in_place.read(), y);

      const std::vector<uint8_t> gy = encode(uniform(n, -1, 1, 4), DType::F32);
      const std::vector<uint8_t> gx = gpu_backward(kind, y, gy, shape, DType::F32);
      const Buffer dy(gpu(), y), dgy(gpu(), gy);
      gpu().softmax_backward(kind, dy.ref(shape, DType::F32), dgy.ref(shape, DType::F32), dgy.ref(shape, DType::F32));
      EXPECT_EQ(dgy.read(), gx);
    }
  }
}

TEST(CudaSoftmax, EmptyTensorsAndErrors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer a(gpu(), 64), b(gpu(), 64), c(gpu(), 64);
  for (const SoftmaxKind kind : kKinds) {
    // Empty: nothing to do (no launch with an empty grid).
    gpu().softmax_forward(kind, a.ref({0, 5}, DType::F32), b.ref({0, 5}, DType::F32));
    gpu().softmax_forward(kind, a.ref({3, 0}, DType::F32), b.ref({3, 0}, DType::F32));
    gpu().softmax_backward(kind, a.ref({0, 5}, DType::F16), b.ref({0, 5}, DType::F16), c.ref({0, 5}, DType::F16));
    EXPECT_THROW(gpu().softmax_forward(kind, a.ref({2, 3}, DType::F32), b.ref({3, 2}, DType::F32)), Error);
    EXPECT_THROW(gpu().softmax_forward(kind, a.ref({2, 3}, DType::F32), b.ref({2, 3}, DType::F16)), Error);
    EXPECT_THROW(gpu().softmax_forward(kind, a.ref({2, 3}, DType::I64), b.ref({2, 3}, DType::I64)), Error);
    EXPECT_THROW(gpu().softmax_backward(kind, a.ref({2, 3}, DType::F32), b.ref({2, 3}, DType::F32),
                                        c.ref({2, 4}, DType::F32)), Error);
    EXPECT_THROW(gpu().softmax_backward(kind, a.ref({2, 3}, DType::F32), b.ref({2, 3}, DType::BF16),
                                        c.ref({2, 3}, DType::F32)), Error);
  }
}

}  // namespace
}  // namespace demi::backend

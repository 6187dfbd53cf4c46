// Tests for backends/cpu/softmax.cpp: softmax and log-softmax forward and backward over the last
// dim against double references, in every floating dtype, plus overflow-safe extreme logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }


using demi::backend::SoftmaxKind;

std::vector<double> forward_ref(SoftmaxKind kind, const std::vector<double>& x, int64_t K) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / K; ++r) {
    const double* xr = x.data() + r * K;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < K; ++j) m = std::max(m, xr[j]);
    for (int64_t j = 0; j < K; ++j) sum += std::exp(xr[j] - m);
    for (int64_t j = 0; j < K; ++j)
      y[r * K + j] = kind == SoftmaxKind::Softmax ? std::exp(xr[j] - m) / sum : xr[j] - m - std::log(sum);
  }
  return y;
}

std::vector<double> backward_ref(SoftmaxKind kind, const std::vector<double>& y, const std::vector<double>& gy,
                                 int64_t K) {
  std::vector<double> gx(y.size());
  for (size_t r = 0; r < y.size() / K; ++r) {
    double s = 0;
    for (int64_t j = 0; j < K; ++j) s += kind == SoftmaxKind::Softmax ? gy[r * K + j] * y[r * K + j] : gy[r * K + j];
    for (int64_t j = 0; j < K; ++j) {
      const size_t i = r * K + j;
      gx[i] = kind == SoftmaxKind::Softmax ? y[i] * (gy[i] - s) : gy[i] - std::exp(y[i]) * s;
    }
  }
  return gx;
}

TEST(CpuSoftmax, ForwardAndBackwardMatchReference) {
  std::mt19937 rng(21);
  const Shape shapes[] = {{}, {1, 1}, {4, 10}, {1, 7}, {2, 3, 5}, {3, 1000}, {64, 100}};
  for (const Shape& shape : shapes) {
    const int64_t K = shape.empty() ? 1 : shape.back();
    for (SoftmaxKind kind : {SoftmaxKind::Softmax, SoftmaxKind::LogSoftmax}) {
      for (DType dtype : kFloating) {
        SCOPED_TRACE(std::string(kind == SoftmaxKind::Softmax ? "softmax" : "log_softmax") + ", numel " +
                     std::to_string(demi::shape_numel(shape)) + ", " + demi::dtype_name(dtype));
        HostTensor x(shape, dtype), y(shape, dtype);
        const std::vector<double> vx = x.randomize(rng, -4.0, 4.0);
        cpu().softmax_forward(kind, x.ref(), y.ref());
        expect_close(y, forward_ref(kind, vx, K), rounded(dtype));

        // Backward from stored (rounded) y and a random grad_y.
        HostTensor gy(shape, dtype), gx(shape, dtype);
        const std::vector<double> vgy = gy.randomize(rng, -1.0, 1.0);
        std::vector<double> vy(vx.size());
        for (size_t i = 0; i < vy.size(); ++i) vy[i] = y.get(static_cast<int64_t>(i));
        cpu().softmax_backward(kind, y.ref(), gy.ref(), gx.ref());
        expect_close(gx, backward_ref(kind, vy, vgy, K), rounded(dtype));
      }
    }
  }
}

TEST(CpuSoftmax, ExtremeLogitsDoNotOverflow) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({3}, dtype), y({3}, dtype);
    x.set(0, 1000);
    x.set(1, 1000);
    x.set(2, -1000);
    cpu().softmax_forward(SoftmaxKind::Softmax, x.ref(), y.ref());
    expect_close(y, {0.5, 0.5, 0.0}, rounded(dtype));
    cpu().softmax_forward(SoftmaxKind::LogSoftmax, x.ref(), y.ref());
    expect_close(y, {-std::log(2.0), -std::log(2.0), -2000 - std::log(2.0)}, rounded(dtype));
  }
  HostTensor h({2}, DType::F16), hy({2}, DType::F16);
  h.set(0, 60000);
  h.set(1, 0);
  cpu().softmax_forward(SoftmaxKind::Softmax, h.ref(), hy.ref());
  expect_close(hy, {1.0, 0.0}, rounded(DType::F16));
}

// A masked row (-inf) on a row long enough for the vectorised exp: exactly 0 where masked, as in
// PyTorch, and the subnormal exp(-100) / 2 where the logit is 100 below the maximum (Eigen's exp
// alone gave 2.9e-39 / 2 for both).
TEST(CpuSoftmax, MaskedAndFarBelowTheMaximum) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({64}, dtype), y({64}, dtype);
    std::vector<double> want(64, 0.0);
    for (int j = 0; j < 64; ++j) x.set(j, -INFINITY);
    x.set(0, 0.0), x.set(1, 0.0), x.set(2, -100.0);
    want[0] = want[1] = 1.0 / (2.0 + std::exp(-100.0));
    want[2] = std::exp(-100.0) / 2.0;
    cpu().softmax_forward(SoftmaxKind::Softmax, x.ref(), y.ref());
    // Relative only below the normal range (a bf16 subnormal keeps few bits): want[2] is 1.9e-44.
    const double rtol = dtype == DType::F32 ? 1e-6 : 0x1p-8;
    expect_close(y, want, demi::test::Tolerance{rtol, dtype == DType::F32 ? 0x1p-149 : 0x1p-133});
    for (int j = 3; j < 64; ++j) EXPECT_EQ(y.get(j), 0.0) << "masked element " << j;
  }
}

TEST(CpuSoftmax, RejectsMismatchedTensors) {
  HostTensor x({2, 3}, DType::F32), y({3, 2}, DType::F32), h({2, 3}, DType::F16);
  EXPECT_THROW(cpu().softmax_forward(SoftmaxKind::Softmax, x.ref(), y.ref()), demi::Error);
  EXPECT_THROW(cpu().softmax_forward(SoftmaxKind::Softmax, x.ref(), h.ref()), demi::Error);
  EXPECT_THROW(cpu().softmax_backward(SoftmaxKind::LogSoftmax, x.ref(), x.ref(), y.ref()), demi::Error);
  HostTensor i({2, 3}, DType::I64);
  EXPECT_THROW(cpu().softmax_forward(SoftmaxKind::Softmax, i.ref(), i.ref()), demi::Error);
}

}  // namespace

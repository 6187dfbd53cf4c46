// Tests for backends/cpu/cross_entropy.cpp: loss against a hand computation and a double
// reference (with label smoothing), grad_logits, and the errors for bad labels and shapes.
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


using demi::backend::CrossEntropyArgs;

DType loss_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

HostTensor targets(const std::vector<int64_t>& labels) {
  HostTensor t({static_cast<int64_t>(labels.size())}, DType::I64);
  for (size_t i = 0; i < labels.size(); ++i) static_cast<int64_t*>(t.ref().data)[i] = labels[i];
  return t;
}

TEST(CpuCrossEntropy, HandComputedLoss) {
  // Row 0: log(e + e^2 + e^3) - 3; row 1 (uniform logits): log 3.
  // With s = 0.1: row loss = lse - 0.9 x_t - 0.1 mean(x).
  const double plain = 0.753109126556245, smoothed = 0.803109126556245;
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor logits({2, 3}, dtype), loss({}, loss_dtype(dtype));
    const double values[] = {1, 2, 3, 1, 1, 1};
    for (int i = 0; i < 6; ++i) logits.set(i, values[i]);
    HostTensor target = targets({2, 0});
    CrossEntropyArgs args;
    args.logits = logits.ref();
    args.target = target.ref();
    args.loss = loss.ref();
    cpu().cross_entropy_forward(args);
    // The loss is fp32 or fp64 whatever the logits: its tolerance is the loss dtype's.
    expect_close(loss, {plain}, rounded(loss_dtype(dtype)));
    args.label_smoothing = 0.1;
    cpu().cross_entropy_forward(args);
    expect_close(loss, {smoothed}, rounded(loss_dtype(dtype)));
  }
}

TEST(CpuCrossEntropy, ForwardAndBackwardMatchReference) {
  std::mt19937 rng(31);
  struct Size {
    int64_t n, k;
  };
  const Size sizes[] = {{1, 1}, {4, 10}, {1, 7}, {32, 100}, {300, 200}};
  for (const Size& sz : sizes) {
    for (double s : {0.0, 0.1}) {
      for (DType dtype : kFloating) {
        SCOPED_TRACE("N " + std::to_string(sz.n) + ", K " + std::to_string(sz.k) + ", smoothing " +
                     std::to_string(s) + ", " + demi::dtype_name(dtype));
        HostTensor logits({sz.n, sz.k}, dtype), loss({}, loss_dtype(dtype)), grad_loss({}, loss_dtype(dtype));
        HostTensor grad_logits({sz.n, sz.k}, dtype);
        const std::vector<double> x = logits.randomize(rng, -5.0, 5.0);
        std::vector<int64_t> labels(static_cast<size_t>(sz.n));
        for (auto& l : labels) l = std::uniform_int_distribution<int64_t>(0, sz.k - 1)(rng);
        HostTensor target = targets(labels);
        grad_loss.set(0, 0.75);

        double total = 0;
        std::vector<double> ref_grad(x.size());
        for (int64_t n = 0; n < sz.n; ++n) {
          const double* row = x.data() + n * sz.k;
          double m = -INFINITY, sum = 0, sum_x = 0;
          for (int64_t j = 0; j < sz.k; ++j) m = std::max(m, row[j]);
          for (int64_t j = 0; j < sz.k; ++j) {
            sum += std::exp(row[j] - m);
            sum_x += row[j];
          }
          const double lse = m + std::log(sum);
          total += lse - (1 - s) * row[labels[n]] - s * sum_x / sz.k;
          for (int64_t j = 0; j < sz.k; ++j) {
            const double q = (1 - s) * (j == labels[n]) + s / sz.k;
            ref_grad[n * sz.k + j] = 0.75 * (std::exp(row[j] - lse) - q) / sz.n;
          }
        }

        CrossEntropyArgs args;
        args.logits = logits.ref();
        args.target = target.ref();
        args.loss = loss.ref();
        args.grad_loss = grad_loss.ref();
        args.grad_logits = grad_logits.ref();
        args.label_smoothing = s;
        cpu().cross_entropy_forward(args);
        expect_close(loss, {total / sz.n}, rounded(loss_dtype(dtype)));
        cpu().cross_entropy_backward(args);
        expect_close(grad_logits, ref_grad, rounded(dtype));
      }
    }
  }
}

TEST(CpuCrossEntropy, OutOfRangeTargetNamesRowValueAndClasses) {
  HostTensor logits({5, 10}, DType::F32), loss({}, DType::F32), grad({5, 10}, DType::F32), gl({}, DType::F32);
  HostTensor target = targets({0, 9, 2, 12, 1});
  CrossEntropyArgs args;
  args.logits = logits.ref();
  args.target = target.ref();
  args.loss = loss.ref();
  args.grad_loss = gl.ref();
  args.grad_logits = grad.ref();
  const std::string expected = "target[3] = 12 is out of range for 10 classes; labels must be in [0, 10)";
  for (int pass = 0; pass < 2; ++pass) {
    try {
      if (pass == 0) cpu().cross_entropy_forward(args);
      else cpu().cross_entropy_backward(args);
      FAIL() << "expected demi::Error";
    } catch (const demi::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  HostTensor negative = targets({0, -1, 0, 0, 0});
  args.target = negative.ref();
  try {
    cpu().cross_entropy_forward(args);
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("target[1] = -1"), std::string::npos) << e.what();
  }
}

TEST(CpuCrossEntropy, RejectsBadShapesAndDtypes) {
  HostTensor logits({4, 3}, DType::F16), loss({}, DType::F32);
  HostTensor target = targets({0, 1, 2, 0});
  CrossEntropyArgs good;
  good.logits = logits.ref();
  good.target = target.ref();
  good.loss = loss.ref();
  EXPECT_NO_THROW(cpu().cross_entropy_forward(good));

  HostTensor short_target = targets({0, 1, 2});
  CrossEntropyArgs args = good;
  args.target = short_target.ref();
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);

  HostTensor flat({12}, DType::F16);
  args = good;
  args.logits = flat.ref();
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);

  HostTensor half_loss({}, DType::F16), vector_loss({1}, DType::F32);
  args = good;
  args.loss = half_loss.ref();
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);
  args.loss = vector_loss.ref();
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);

  HostTensor float_target({4}, DType::F32);
  args = good;
  args.target = float_target.ref();
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);

  args = good;
  args.label_smoothing = 1.5;
  EXPECT_THROW(cpu().cross_entropy_forward(args), demi::Error);

  HostTensor wrong_grad({4, 3}, DType::F32), gl({}, DType::F32);
  args = good;
  args.grad_loss = gl.ref();
  args.grad_logits = wrong_grad.ref();
  EXPECT_THROW(cpu().cross_entropy_backward(args), demi::Error);
}

}  // namespace

// Pins backends/cuda/cross_entropy.cu: the fused softmax cross-entropy (mean over the batch, label
// smoothing) on cuda:0 against hand values and the CPU backend, forward and backward, for K on the
// warp path (10, 1000) and the block path (3000), N = 1 and 257, every floating logits dtype;
// bad labels (negative, == K, several) giving the CPU's message; bad shapes and dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

DType loss_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

std::vector<uint8_t> label_bytes(const std::vector<int64_t>& labels) {
  std::vector<uint8_t> bytes(labels.size() * sizeof(int64_t));
  if (!labels.empty()) std::memcpy(bytes.data(), labels.data(), bytes.size());
  return bytes;
}

// A demi::Error's message without its " (file:line)" suffix, so the two backends' compare equal.
std::string without_location(const std::string& message) { return message.substr(0, message.rfind(" (")); }

// One problem held on both backends: logits [N, K], target [N], loss, grad_loss (0-d), grad_logits.
struct Problem {
  Shape shape;
  DType dtype, grad_loss_dtype;
  double smoothing;
  std::vector<uint8_t> logits, target, grad_loss;

  CrossEntropyArgs cpu_args(std::vector<uint8_t>& loss, std::vector<uint8_t>& grad) const {
    CrossEntropyArgs a;
    a.logits = TensorRef{const_cast<uint8_t*>(logits.data()), shape, dtype};
    a.target = TensorRef{const_cast<uint8_t*>(target.data()), {shape[0]}, DType::I64};
    a.loss = TensorRef{loss.data(), {}, loss_dtype(dtype)};
    a.grad_loss = TensorRef{const_cast<uint8_t*>(grad_loss.data()), {}, grad_loss_dtype};
    a.grad_logits = TensorRef{grad.data(), shape, dtype};
    a.label_smoothing = smoothing;
    return a;
  }
};

// The device side of a Problem: buffers and the args pointing at them.
struct DeviceProblem {
  Buffer logits, target, grad_loss, loss, grad;
  CrossEntropyArgs args;
  explicit DeviceProblem(const Problem& p)
      : logits(gpu(), p.logits), target(gpu(), p.target), grad_loss(gpu(), p.grad_loss),
        loss(gpu(), dtype_size(loss_dtype(p.dtype))), grad(gpu(), p.logits.size()) {
    args.logits = logits.ref(p.shape, p.dtype);
    args.target = target.ref({p.shape[0]}, DType::I64);
    args.loss = loss.ref({}, loss_dtype(p.dtype));
    args.grad_loss = grad_loss.ref({}, p.grad_loss_dtype);
    args.grad_logits = grad.ref(p.shape, p.dtype);
    args.label_smoothing = p.smoothing;
  }
};

Problem make_problem(int64_t N, int64_t K, DType dtype, double smoothing, unsigned seed,
                     DType grad_loss_dtype = DType::F32, double grad_loss = 2.5) {
  Problem p{{N, K}, dtype, grad_loss_dtype, smoothing, {}, {}, {}};
  p.logits = encode(uniform(static_cast<size_t>(N * K), -5.0, 5.0, seed), dtype);
  std::mt19937 gen(seed + 1000);
  std::uniform_int_distribution<int64_t> label(0, K - 1);
  std::vector<int64_t> labels(static_cast<size_t>(N));
  for (int64_t& l : labels) l = label(gen);
  if (N > 2) {
    labels[0] = 0;
    labels[1] = K - 1;
  }
  p.target = label_bytes(labels);
  p.grad_loss = encode({grad_loss}, grad_loss_dtype);
  return p;
}

// A result stored in `stored` from logits of `dtype`, [N, K]: device_math's rtol plus, for F64 logits,
// (K + N) 2^-52: both backends sum exp over a row and the row losses in double, in different
// orders, below fp32's resolution but not F64's. The same rate bounds the absolute error in units
// of `unit` (1 for the loss, grad_loss / N for gradients).
Tolerance ce_tolerance(DType stored, DType dtype, int64_t N, int64_t K, double unit) {
  const double summation = dtype == DType::F64 ? static_cast<double>(K + N) * epsilon(DType::F64) : 0.0;
  const double r = device_math(stored).rtol + summation;
  return {r, r * unit};
}

TEST(CudaCrossEntropy, HandComputedLoss) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // Row 0: log(e + e^2 + e^3) - 3; row 1 (uniform logits): log 3. With s = 0.1:
  // row loss = lse - 0.9 x_t - 0.1 mean(x).
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (const auto& [s, want] : {std::pair{0.0, 0.753109126556245}, std::pair{0.1, 0.803109126556245}}) {
      Problem p{{2, 3}, dtype, DType::F32, s, encode({1, 2, 3, 1, 1, 1}, dtype), label_bytes({2, 0}),
                encode({1.0}, DType::F32)};
      DeviceProblem d(p);
      gpu().cross_entropy_forward(d.args);
      const double got = decode(d.loss.read(), loss_dtype(dtype))[0];
      // Relative only: 4 device_math rtols of the (positive) hand value.
      const Tolerance tol{4 * device_math(loss_dtype(dtype)).rtol, 0.0};
      expect_close({got}, {want}, tol, "smoothing " + std::to_string(s));
    }
  }
}

TEST(CudaCrossEntropy, ForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  unsigned seed = 1;
  for (const int64_t N : {int64_t{1}, int64_t{257}}) {
    for (const int64_t K : {int64_t{10}, int64_t{1000}, int64_t{3000}}) {
      for (const double s : {0.0, 0.1}) {
        for (const DType dtype : kFloatDTypes) {
          std::ostringstream name;
          name << "N " << N << ", K " << K << ", smoothing " << s << ", " << dtype;
          SCOPED_TRACE(name.str());
          const Problem p = make_problem(N, K, dtype, s, seed++);
          std::vector<uint8_t> loss(dtype_size(loss_dtype(dtype))), grad(p.logits.size());
          const CrossEntropyArgs host = p.cpu_args(loss, grad);
          cpu().cross_entropy_forward(host);
          cpu().cross_entropy_backward(host);
          DeviceProblem d(p);
          gpu().cross_entropy_forward(d.args);
          gpu().cross_entropy_backward(d.args);

          const DType lt = loss_dtype(dtype);
          expect_close(decode(d.loss.read(), lt), decode(loss, lt), ce_tolerance(lt, dtype, N, K, 1.0),
                       name.str() + " loss");
          // grad = grad_loss / N * (p - q), p and q in [0, 1]: absolute error in units of grad_loss / N.
          const double unit = 2.5 / static_cast<double>(N);
          expect_close(decode(d.grad.read(), dtype), decode(grad, dtype), ce_tolerance(dtype, dtype, N, K, unit),
                       name.str() + " grad_logits");
        }
      }
    }
  }
}

TEST(CudaCrossEntropy, GradLossOfAnyFloatingDTypeIsReadOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType gl : kFloatDTypes) {
    for (const DType dtype : {DType::F32, DType::F16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " logits, " + dtype_name(gl) + " grad_loss");
      const Problem p = make_problem(33, 17, dtype, 0.05, 77, gl, -0.375);
      std::vector<uint8_t> loss(4), grad(p.logits.size());
      cpu().cross_entropy_backward(p.cpu_args(loss, grad));
      DeviceProblem d(p);
      gpu().cross_entropy_backward(d.args);
      const double unit = 0.375 / 33;
      expect_close(decode(d.grad.read(), dtype), decode(grad, dtype), ce_tolerance(dtype, dtype, 33, 17, unit), "grad");
    }
  }
}

TEST(CudaCrossEntropy, InPlaceBackwardMatchesOutOfPlace) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const int64_t K : {int64_t{10}, int64_t{3000}}) {
    const Problem p = make_problem(9, K, DType::F32, 0.1, 5);
    DeviceProblem d(p);
    gpu().cross_entropy_backward(d.args);
    d.args.grad_logits = d.args.logits;  // grad_logits over logits
    gpu().cross_entropy_backward(d.args);
    EXPECT_EQ(d.logits.read(), d.grad.read()) << "K " << K;
  }
}

TEST(CudaCrossEntropy, EmptyBatchGivesNaNLoss) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType dtype : kFloatDTypes) {
    Problem p{{0, 10}, dtype, DType::F32, 0.0, {}, {}, encode({1.0}, DType::F32)};
    DeviceProblem d(p);
    gpu().cross_entropy_forward(d.args);
    EXPECT_TRUE(std::isnan(decode(d.loss.read(), loss_dtype(dtype))[0])) << dtype_name(dtype);
    gpu().cross_entropy_backward(d.args);  // nothing to write
  }
}

TEST(CudaCrossEntropy, OutOfRangeTargetNamesRowAndValueLikeTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  struct BadCase {
    int64_t N, K;
    std::vector<std::pair<int64_t, int64_t>> bad;  // (row, label)
    std::string expected;  // what both backends' messages contain
  };
  const std::vector<BadCase> cases = {
      {8, 10, {{2, -1}},
       "target[2] = -1 is out of range for 10 classes; labels must be in [0, 10) (demi's cross_entropy has no "
       "ignore_index"},
      {8, 10, {{4, 10}}, "target[4] = 10 is out of range for 10 classes; labels must be in [0, 10)"},
      // Several bad rows, on both sides of a block of warps: the first one is named.
      {257, 3000, {{200, 3000}, {100, -7}, {256, 5000}}, "target[100] = -7 is out of range for 3000 classes"},
      {257, 10, {{255, 11}, {9, 12}}, "target[9] = 12 is out of range for 10 classes"},
      // K = 0: no label is a class.
      {3, 0, {}, "target[0] = 0 is out of range for 0 classes; labels must be in [0, 0)"},
  };
  for (const BadCase& c : cases) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(c.expected + ", " + dtype_name(dtype));
      Problem p = make_problem(c.N, c.K == 0 ? 1 : c.K, dtype, 0.1, 11);
      p.shape = {c.N, c.K};
      p.logits.resize(static_cast<size_t>(c.N * c.K) * dtype_size(dtype));
      std::vector<int64_t> labels(static_cast<size_t>(c.N));
      std::memcpy(labels.data(), p.target.data(), p.target.size());
      for (const auto& [row, label] : c.bad) labels[static_cast<size_t>(row)] = label;
      p.target = label_bytes(labels);
      // Never empty (K = 0): an empty vector's null data() would read as an undefined grad_logits.
      std::vector<uint8_t> loss(4), grad(std::max<size_t>(p.logits.size(), 1));
      const CrossEntropyArgs host = p.cpu_args(loss, grad);
      DeviceProblem d(p);
      for (const bool forward : {true, false}) {
        std::string cpu_message, gpu_message;
        try {
          if (forward) cpu().cross_entropy_forward(host);
          else cpu().cross_entropy_backward(host);
        } catch (const Error& e) {
          cpu_message = without_location(e.what());
        }
        // The call itself does not wait for the check: the error comes at the next synchronisation.
        EXPECT_NO_THROW(forward ? gpu().cross_entropy_forward(d.args) : gpu().cross_entropy_backward(d.args));
        try {
          gpu().synchronize();
          ADD_FAILURE() << "no demi::Error from the " << (forward ? "forward" : "backward");
        } catch (const Error& e) {
          gpu_message = without_location(e.what());
        }
        EXPECT_NE(gpu_message.find(c.expected), std::string::npos) << gpu_message;
        EXPECT_EQ(gpu_message, cpu_message);
      }
    }
  }
  // The report word is reset by each call: a good batch after a bad one passes.
  const Problem good = make_problem(8, 10, DType::F32, 0.0, 12);
  DeviceProblem d(good);
  EXPECT_NO_THROW(gpu().cross_entropy_forward(d.args));
  EXPECT_NO_THROW(gpu().cross_entropy_backward(d.args));
}

TEST(CudaCrossEntropy, RejectsBadShapesAndDTypes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Problem p = make_problem(4, 3, DType::F32, 0.0, 13);
  auto expect_throw = [&](const char* what, auto&& change, bool forward) {
    DeviceProblem d(p);
    change(d.args);
    if (forward) EXPECT_THROW(gpu().cross_entropy_forward(d.args), Error) << what;
    else EXPECT_THROW(gpu().cross_entropy_backward(d.args), Error) << what;
  };
  for (const bool forward : {true, false}) {
    expect_throw("1-D logits", [](CrossEntropyArgs& a) { a.logits.shape = {12}; }, forward);
    expect_throw("integer logits", [](CrossEntropyArgs& a) { a.logits.dtype = DType::I64; }, forward);
    expect_throw("float target", [](CrossEntropyArgs& a) { a.target.dtype = DType::F32; }, forward);
    expect_throw("target of the wrong length", [](CrossEntropyArgs& a) { a.target.shape = {3}; }, forward);
    expect_throw("smoothing above 1", [](CrossEntropyArgs& a) { a.label_smoothing = 1.5; }, forward);
    expect_throw("negative smoothing", [](CrossEntropyArgs& a) { a.label_smoothing = -0.1; }, forward);
  }
  expect_throw("F16 loss for F32 logits", [](CrossEntropyArgs& a) { a.loss.dtype = DType::F16; }, true);
  expect_throw("1-D loss", [](CrossEntropyArgs& a) { a.loss.shape = {1}; }, true);
  expect_throw("grad_logits of another shape", [](CrossEntropyArgs& a) { a.grad_logits.shape = {3, 4}; }, false);
  expect_throw("grad_logits of another dtype", [](CrossEntropyArgs& a) { a.grad_logits.dtype = DType::F16; }, false);
  expect_throw("1-D grad_loss", [](CrossEntropyArgs& a) { a.grad_loss.shape = {1}; }, false);
  expect_throw("integer grad_loss", [](CrossEntropyArgs& a) { a.grad_loss.dtype = DType::I64; }, false);
}

}  // namespace
}  // namespace demi::backend

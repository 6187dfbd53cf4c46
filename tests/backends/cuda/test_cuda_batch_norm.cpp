// Pins backends/cuda/batch_norm.cu: training and eval forward (output, save_mean, save_invstd,
// running stats) and backward (grad_input, grad_weight, grad_bias, each optional) on cuda:0 against
// the CPU backend, for [N, C] and [N, C, H, W], odd, minimal and large shapes (channels split over
// many blocks), a large mean over a small spread, every floating dtype, and the errors.
//
// Tolerances: the CPU sums squared deviations and g * (x - mean) plane by plane in fp32 (double for
// F64) where the CUDA kernels sum in double in another order, so the statistics agree to ~1e-6
// relative, not to fp32's last bits: 1e-5 for fp32 statistics, 1e-12 for fp64 ones (summation order
// only). Sums (grad_weight, grad_bias) are compared relative to the sum of their terms' magnitudes.
// Outputs in a half type are compared at that type's tolerance: a statistic 1e-6 off moves a
// rounding by at most one unit.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

DType stats_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

// Statistics computed from dtype, |got - want| <= r (1 + |want|): normalized(fp32 or fp64), r = 1e-5
// or 1e-12, the two backends' summation orders (see the file comment).
Tolerance stats_tol(DType dtype) { return normalized(stats_dtype(dtype)); }

// A tensor stored in dtype whose value depends on the statistics: normalized(dtype), or for a half
// type device_math (a statistic 1e-6 off moves its rounding by at most one unit).
Tolerance output_tol(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 ? device_math(dtype) : normalized(dtype);
}

// A batch-norm problem: input [N, C] or [N, C, H, W] of dtype, per-channel vectors in its
// statistics dtype. Empty vectors are absent tensors.
struct BnProblem {
  Shape shape;
  DType dtype = DType::F32;
  std::vector<double> x, grad_y;                   // numel values
  std::vector<double> weight, bias;                // C values or absent
  std::vector<double> running_mean, running_var;   // C values or absent
  std::vector<double> save_mean, save_invstd;      // C values, for backward
  double momentum = 0.1, eps = 1e-5;

  int64_t channels() const { return shape[1]; }
};

struct BnResult {
  std::vector<double> y, save_mean, save_invstd, running_mean, running_var;  // forward
  std::vector<double> grad_input, grad_weight, grad_bias;                    // backward
};

// A device buffer holding `values` (absent when empty and not `wanted`), encoded in dtype.
class MaybeBuffer {
 public:
  MaybeBuffer(Kernels& k, const std::vector<double>& values, DType dtype, const Shape& shape, bool wanted)
      : dtype_(dtype), shape_(shape) {
    // An output starts as all ones (NaN in every floating dtype), so a missed element shows.
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    if (!values.empty()) buffer_.emplace(k, encode(values, dtype));
    else if (wanted) buffer_.emplace(k, std::vector<uint8_t>(bytes, 0xff));
  }
  TensorRef ref() const { return buffer_ ? buffer_->ref(shape_, dtype_) : TensorRef{}; }
  std::vector<double> read() const { return buffer_ ? decode(buffer_->read(), dtype_) : std::vector<double>{}; }

 private:
  DType dtype_;
  Shape shape_;
  std::optional<Buffer> buffer_;
};

// What a backward call should write.
struct BnWants {
  bool grad_input = true, grad_weight = true, grad_bias = true;
};

BnResult run_forward(Kernels& k, const BnProblem& p, BatchNormMode mode, bool save_stats = true) {
  const DType sd = stats_dtype(p.dtype);
  const Shape cs{p.channels()};
  const MaybeBuffer x(k, p.x, p.dtype, p.shape, true), y(k, {}, p.dtype, p.shape, true);
  const MaybeBuffer w(k, p.weight, sd, cs, false), b(k, p.bias, sd, cs, false);
  const MaybeBuffer rm(k, p.running_mean, sd, cs, false), rv(k, p.running_var, sd, cs, false);
  const MaybeBuffer sm(k, {}, sd, cs, save_stats), si(k, {}, sd, cs, save_stats);
  BatchNormArgs a;
  a.mode = mode;
  a.input = x.ref(), a.output = y.ref(), a.weight = w.ref(), a.bias = b.ref();
  a.running_mean = rm.ref(), a.running_var = rv.ref(), a.save_mean = sm.ref(), a.save_invstd = si.ref();
  a.momentum = p.momentum, a.eps = p.eps;
  k.batch_norm_forward(a);
  BnResult r;
  r.y = y.read(), r.running_mean = rm.read(), r.running_var = rv.read();
  if (mode == BatchNormMode::Train) r.save_mean = sm.read(), r.save_invstd = si.read();
  return r;
}

BnResult run_backward(Kernels& k, const BnProblem& p, BnWants wants) {
  const DType sd = stats_dtype(p.dtype);
  const Shape cs{p.channels()};
  const MaybeBuffer x(k, p.x, p.dtype, p.shape, true), gy(k, p.grad_y, p.dtype, p.shape, true);
  const MaybeBuffer gx(k, {}, p.dtype, p.shape, wants.grad_input);
  const MaybeBuffer w(k, p.weight, sd, cs, false);
  const MaybeBuffer sm(k, p.save_mean, sd, cs, true), si(k, p.save_invstd, sd, cs, true);
  const MaybeBuffer gw(k, {}, sd, cs, wants.grad_weight), gb(k, {}, sd, cs, wants.grad_bias);
  BatchNormArgs a;
  a.input = x.ref(), a.grad_output = gy.ref(), a.grad_input = gx.ref(), a.weight = w.ref();
  a.save_mean = sm.ref(), a.save_invstd = si.ref(), a.grad_weight = gw.ref(), a.grad_bias = gb.ref();
  k.batch_norm_backward(a);
  BnResult r;
  r.grad_input = gx.read(), r.grad_weight = gw.read(), r.grad_bias = gb.read();
  return r;
}

// Random problem: x = offset + U(-2, 2) stored in dtype, affine parameters and running stats.
BnProblem make_problem(const Shape& shape, DType dtype, bool affine, bool running, double offset, unsigned seed) {
  BnProblem p;
  p.shape = shape;
  p.dtype = dtype;
  const size_t n = static_cast<size_t>(shape_numel(shape)), c = static_cast<size_t>(shape[1]);
  p.x = uniform(n, offset - 2, offset + 2, seed);
  p.grad_y = uniform(n, -1, 1, seed + 1);
  if (affine) p.weight = uniform(c, 0.5, 1.5, seed + 2), p.bias = uniform(c, -0.5, 0.5, seed + 3);
  if (running) p.running_mean = uniform(c, -0.2, 0.2, seed + 4), p.running_var = uniform(c, 0.5, 2, seed + 5);
  return p;
}

std::string name_of(const char* what, const Shape& shape, DType dtype) {
  std::ostringstream name;
  name << what << " " << shape << " " << dtype;
  return name.str();
}

// Per-channel sums of |terms| of grad_bias (|g|) and grad_weight (|g * (x - mean) * invstd|): the
// scale a reordered sum's error is relative to.
void magnitudes(const BnProblem& p, std::vector<double>& bias_scale, std::vector<double>& weight_scale) {
  const int64_t c_count = p.channels(), hw = p.shape.size() == 4 ? p.shape[2] * p.shape[3] : 1;
  bias_scale.assign(static_cast<size_t>(c_count), 0.0);
  weight_scale.assign(static_cast<size_t>(c_count), 0.0);
  for (size_t i = 0; i < p.x.size(); ++i) {
    const size_t c = static_cast<size_t>((static_cast<int64_t>(i) / hw) % c_count);
    bias_scale[c] += std::fabs(p.grad_y[i]);
    weight_scale[c] += std::fabs(p.grad_y[i] * (p.x[i] - p.save_mean[c]) * p.save_invstd[c]);
  }
}

// A reordered sum's error is relative to the sum of its terms' magnitudes: channel c's bound is
// r (1 + scale[c]), with r = stats_tol's.
std::vector<Tolerance> sums_tol(DType dtype, const std::vector<double>& scale) {
  const double r = stats_tol(dtype).rtol;
  std::vector<Tolerance> tol;
  for (const double s : scale) tol.push_back({0.0, r * (1 + s)});
  return tol;
}

const std::vector<Shape> kShapes = {
    {7, 5},             // [N, C]
    {2, 3},             // smallest [N, C] batch that trains
    {1, 3, 1, 2},       // count 2
    {4, 3, 5, 7},       // odd plane
    {3, 1100, 1, 1},    // many channels, one block each
    {5, 2, 33, 17},     // planes not a multiple of the block
    {64, 16, 32, 32},   // CIFAR-sized layer
    {512, 1, 32, 32},   // one wide channel split over many blocks
};

// A training forward of p on the CPU (want) and on cuda:0 (got).
struct ForwardPair {
  BnResult want, got;
};

// Runs a training forward of p on both backends and compares the output, save_mean, save_invstd and
// running_var; returns both results for further checks.
ForwardPair expect_train_forward_matches(const BnProblem& p, const std::string& name) {
  ForwardPair r{run_forward(cpu(), p, BatchNormMode::Train), run_forward(gpu(), p, BatchNormMode::Train)};
  const Tolerance st = stats_tol(p.dtype);
  expect_close(r.got.y, r.want.y, output_tol(p.dtype), name + " output");
  expect_close(r.got.save_mean, r.want.save_mean, st, name + " save_mean");
  expect_close(r.got.save_invstd, r.want.save_invstd, st, name + " save_invstd");
  expect_close(r.got.running_var, r.want.running_var, st, name + " running_var");
  return r;
}

// p with save_mean and save_invstd from the CPU's training forward, as a backward takes them.
BnProblem with_saved_stats(BnProblem p) {
  const BnResult stats = run_forward(cpu(), p, BatchNormMode::Train);
  p.save_mean = stats.save_mean, p.save_invstd = stats.save_invstd;
  return p;
}

TEST(CudaBatchNorm, TrainForwardMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const Shape& shape : kShapes) {
    for (const DType dtype : kFloatDTypes) {
      for (const bool affine : {true, false}) {
        const std::string name = name_of(affine ? "train forward" : "train forward without affine", shape, dtype);
        SCOPED_TRACE(name);
        const ForwardPair r = expect_train_forward_matches(make_problem(shape, dtype, affine, true, 0.5, 11), name);
        expect_close(r.got.running_mean, r.want.running_mean, stats_tol(dtype), name + " running_mean");
      }
    }
  }
}

TEST(CudaBatchNorm, TrainForwardLargeMeanSmallSpread) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // x = 1000 + U(-2, 2): E[x^2] - E[x]^2 in fp32 would lose the variance (1.33) to cancellation.
  for (const DType dtype : kFloatDTypes) {
    const Shape shape{16, 4, 24, 24};
    const std::string name = name_of("train forward, mean 1000", shape, dtype);
    SCOPED_TRACE(name);
    expect_train_forward_matches(make_problem(shape, dtype, true, true, 1000.0, 21), name);
  }
}

TEST(CudaBatchNorm, TrainForwardOptionalOutputsAndInPlace) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Shape shape{6, 3, 5, 5};
  for (const DType dtype : kFloatDTypes) {
    const std::string name = name_of("train forward without running or saved stats", shape, dtype);
    SCOPED_TRACE(name);
    const BnProblem p = make_problem(shape, dtype, true, false, 0.0, 31);
    const BnResult want = run_forward(cpu(), p, BatchNormMode::Train, false);
    const BnResult got = run_forward(gpu(), p, BatchNormMode::Train, false);
    expect_close(got.y, want.y, output_tol(dtype), name + " output");
    // In place (output = input), as the CPU allows.
    const DType sd = stats_dtype(dtype);
    const Buffer x(gpu(), encode(p.x, dtype)), w(gpu(), encode(p.weight, sd)), b(gpu(), encode(p.bias, sd));
    BatchNormArgs a;
    a.input = x.ref(shape, dtype), a.output = x.ref(shape, dtype);
    a.weight = w.ref({3}, sd), a.bias = b.ref({3}, sd);
    gpu().batch_norm_forward(a);
    expect_close(decode(x.read(), dtype), want.y, output_tol(dtype), name + " in place");
  }
}

TEST(CudaBatchNorm, EvalForwardMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const Shape& shape : {Shape{7, 5}, Shape{1, 3}, Shape{1, 3, 1, 1}, Shape{4, 3, 5, 7}, Shape{64, 16, 32, 32},
                             Shape{0, 3}, Shape{0, 3, 4, 4}}) {
    for (const DType dtype : kFloatDTypes) {
      for (const bool affine : {true, false}) {
        const std::string name = name_of(affine ? "eval forward" : "eval forward without affine", shape, dtype);
        SCOPED_TRACE(name);
        const BnProblem p = make_problem(shape, dtype, affine, true, 0.5, 41);
        const BnResult want = run_forward(cpu(), p, BatchNormMode::Eval);
        const BnResult got = run_forward(gpu(), p, BatchNormMode::Eval);
        // No reduction: the same double coefficients and fp32 arithmetic as the CPU, so tight.
        expect_close(got.y, want.y, device_math(dtype), name + " output");
        expect_close(got.running_mean, want.running_mean, device_math(stats_dtype(dtype)),
                     name + " running_mean untouched");
      }
    }
  }
}

TEST(CudaBatchNorm, BackwardMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const Shape& shape : kShapes) {
    for (const DType dtype : kFloatDTypes) {
      for (const bool affine : {true, false}) {
        const std::string name = name_of(affine ? "backward" : "backward without weight", shape, dtype);
        SCOPED_TRACE(name);
        const BnProblem p = with_saved_stats(make_problem(shape, dtype, affine, false, 0.5, 51));
        const BnResult want = run_backward(cpu(), p, {});
        const BnResult got = run_backward(gpu(), p, {});
        std::vector<double> bias_scale, weight_scale;
        magnitudes(p, bias_scale, weight_scale);
        expect_close(got.grad_input, want.grad_input, output_tol(dtype), name + " grad_input");
        expect_close(got.grad_weight, want.grad_weight, sums_tol(dtype, weight_scale), name + " grad_weight");
        expect_close(got.grad_bias, want.grad_bias, sums_tol(dtype, bias_scale), name + " grad_bias");
      }
    }
  }
}

TEST(CudaBatchNorm, BackwardEachOutputOptional) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Shape shape{5, 4, 6, 3};
  for (const DType dtype : kFloatDTypes) {
    const BnProblem p = with_saved_stats(make_problem(shape, dtype, true, false, 0.0, 61));
    const BnResult want = run_backward(cpu(), p, {});
    std::vector<double> bias_scale, weight_scale;
    magnitudes(p, bias_scale, weight_scale);
    for (int mask = 0; mask < 8; ++mask) {
      const BnWants wants{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      std::ostringstream name;
      name << "backward " << shape << " " << dtype << " grad_input " << wants.grad_input << " grad_weight "
           << wants.grad_weight << " grad_bias " << wants.grad_bias;
      SCOPED_TRACE(name.str());
      const BnResult got = run_backward(gpu(), p, wants);
      if (wants.grad_input) expect_close(got.grad_input, want.grad_input, output_tol(dtype), name.str());
      if (wants.grad_weight)
        expect_close(got.grad_weight, want.grad_weight, sums_tol(dtype, weight_scale), name.str());
      if (wants.grad_bias) expect_close(got.grad_bias, want.grad_bias, sums_tol(dtype, bias_scale), name.str());
    }
  }
}

TEST(CudaBatchNorm, BackwardOfAnEmptyBatchZeroesParameterGradients) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const Shape& shape : {Shape{0, 3}, Shape{0, 3, 4, 4}, Shape{2, 3, 0, 4}}) {
    BnProblem p = make_problem(shape, DType::F32, true, false, 0.0, 71);
    p.save_mean = {0.1, 0.2, 0.3}, p.save_invstd = {1.0, 2.0, 3.0};
    const std::string name = name_of("backward of an empty batch", shape, DType::F32);
    const BnResult want = run_backward(cpu(), p, {});
    const BnResult got = run_backward(gpu(), p, {});
    EXPECT_EQ(got.grad_weight, want.grad_weight) << name;
    EXPECT_EQ(got.grad_bias, want.grad_bias) << name;
    EXPECT_EQ(got.grad_bias, (std::vector<double>{0, 0, 0})) << name;
  }
}

TEST(CudaBatchNorm, Errors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // One value per channel has no variance: refused in training (as on the CPU), fine in eval.
  for (const Shape& shape : {Shape{1, 3}, Shape{1, 3, 1, 1}}) {
    const BnProblem p = make_problem(shape, DType::F32, true, true, 0.0, 81);
    EXPECT_THROW(run_forward(cpu(), p, BatchNormMode::Train), Error) << name_of("train forward", shape, DType::F32);
    EXPECT_THROW(run_forward(gpu(), p, BatchNormMode::Train), Error) << name_of("train forward", shape, DType::F32);
  }
  const Shape shape{2, 3, 2, 2};
  const Buffer x(gpu(), encode(uniform(24, -1, 1, 1), DType::F32)), y(gpu(), 24 * 8);
  const Buffer stats(gpu(), encode({1, 1, 1}, DType::F32)), stats_f16(gpu(), encode({1, 1, 1}, DType::F16));
  auto args = [&] {
    BatchNormArgs a;
    a.input = x.ref(shape, DType::F32), a.output = y.ref(shape, DType::F32);
    a.weight = stats.ref({3}, DType::F32), a.running_mean = stats.ref({3}, DType::F32);
    a.running_var = stats.ref({3}, DType::F32);
    return a;
  };
  gpu().batch_norm_forward(args());  // the valid call
  BatchNormArgs a = args();
  a.input.dtype = DType::I64, a.output.dtype = DType::I64;
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.input.shape = a.output.shape = {2, 3, 4};
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.output.dtype = DType::F16;
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.input.dtype = a.output.dtype = DType::F16;
  a.weight = stats_f16.ref({3}, DType::F16);  // parameters stay fp32 for half inputs
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.weight.shape = {2};
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.mode = BatchNormMode::Eval;
  a.running_var = TensorRef{};
  EXPECT_THROW(gpu().batch_norm_forward(a), Error);
  a = args();
  a.grad_output = y.ref(shape, DType::F32), a.grad_input = y.ref(shape, DType::F32);
  a.save_mean = stats.ref({3}, DType::F32);  // no save_invstd
  EXPECT_THROW(gpu().batch_norm_backward(a), Error);
  a.save_invstd = stats.ref({3}, DType::F32);
  a.grad_input.shape = {2, 3, 4};
  EXPECT_THROW(gpu().batch_norm_backward(a), Error);
}

}  // namespace
}  // namespace demi::backend

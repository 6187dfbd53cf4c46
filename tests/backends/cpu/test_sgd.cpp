// Tests for backends/cpu/sgd.cpp: three steps against a hand-rolled PyTorch-SGD loop in double
// (momentum, dampening, nesterov, weight decay), the fp32 master-weight path, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

// Host storage behind a TensorRef; values go in and out as double, through demi::Half and
// demi::BFloat16 (an implementation independent of the backend's Eigen conversions).
class HostTensor {
 public:
  HostTensor(Shape shape, DType dtype)
      : shape_(std::move(shape)),
        dtype_(dtype),
        storage_(static_cast<size_t>(demi::shape_numel(shape_)) * demi::dtype_size(dtype) / 8 + 1) {}
  TensorRef ref() { return TensorRef{storage_.data(), shape_, dtype_}; }
  int64_t numel() const { return demi::shape_numel(shape_); }
  void set(int64_t i, double v) {
    void* p = storage_.data();
    switch (dtype_) {
      case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::F64: static_cast<double*>(p)[i] = v; break;
      case DType::F16: static_cast<demi::Half*>(p)[i] = demi::Half(static_cast<float>(v)); break;
      case DType::BF16: static_cast<demi::BFloat16*>(p)[i] = demi::BFloat16(static_cast<float>(v)); break;
      case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    }
  }
  double get(int64_t i) const {
    const void* p = storage_.data();
    switch (dtype_) {
      case DType::F32: return static_cast<const float*>(p)[i];
      case DType::F64: return static_cast<const double*>(p)[i];
      case DType::F16: return static_cast<float>(static_cast<const demi::Half*>(p)[i]);
      case DType::BF16: return static_cast<float>(static_cast<const demi::BFloat16*>(p)[i]);
      case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case DType::U8: return static_cast<const uint8_t*>(p)[i];
    }
    return 0.0;
  }
  // Fills with uniform values in [lo, hi), then reads them back so callers see the stored values.
  std::vector<double> randomize(std::mt19937& rng, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> values(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) {
      set(i, dist(rng));
      values[i] = get(i);
    }
    return values;
  }

 private:
  Shape shape_;
  DType dtype_;
  std::vector<double> storage_;  // doubles: 8-byte alignment for every dtype
};

// atol + rtol * |ref|, rtol from the dtype's epsilon (fp16 2^-10, bf16 2^-7).
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType d) {
  switch (d) {
    case DType::F64: return {1e-12, 1e-13};
    case DType::F32: return {2e-6, 1e-7};
    case DType::F16: return {0x1p-10, 1e-7};
    case DType::BF16: return {0x1p-7, 1e-7};
    default: return {0.0, 0.0};
  }
}

// Checks every element; NaN matches NaN. Stops after a few failures to keep the log short.
void expect_close(const std::vector<double>& ref, const HostTensor& got, Tolerance tol) {
  ASSERT_EQ(static_cast<int64_t>(ref.size()), got.numel());
  int failures = 0;
  for (size_t i = 0; i < ref.size() && failures < 5; ++i) {
    const double g = got.get(static_cast<int64_t>(i));
    if (std::isnan(ref[i]) && std::isnan(g)) continue;
    const bool ok = ref[i] == g || std::fabs(g - ref[i]) <= tol.atol + tol.rtol * std::fabs(ref[i]);
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << "element " << i << ": got " << g << ", expected " << ref[i];
  }
}

const DType kFloating[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

using demi::backend::SgdArgs;

struct Config {
  const char* name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

const Config kConfigs[] = {
    {"plain", 0.1, 0.0, 0.0, 0.0, false},
    {"momentum", 0.1, 0.9, 0.0, 0.0, false},
    {"momentum, dampening, weight decay", 0.05, 0.9, 0.1, 0.01, false},
    {"nesterov, weight decay", 0.1, 0.9, 0.0, 1e-4, true},
};

// PyTorch's torch.optim.SGD, one parameter, in double.
struct ReferenceSgd {
  Config c;
  std::vector<double> p, buf;
  void step(const std::vector<double>& grad, bool first) {
    buf.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + c.weight_decay * p[i];
      if (c.momentum != 0.0) {
        buf[i] = first ? g : c.momentum * buf[i] + (1 - c.dampening) * g;
        g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
      }
      p[i] -= c.lr * g;
    }
  }
};

// p - lr * g cancels: the rounding error scales with |p| and lr * |g| (about 1 here), not with the
// result, so the absolute part of the tolerance is rtol at that unit scale.
Tolerance unit_scale(Tolerance t) { return {t.rtol, t.rtol}; }

SgdArgs make_args(const Config& c, bool first) {
  SgdArgs args;
  args.lr = c.lr;
  args.momentum = c.momentum;
  args.dampening = c.dampening;
  args.weight_decay = c.weight_decay;
  args.nesterov = c.nesterov;
  args.first_step = first;
  return args;
}

TEST(CpuSgd, ThreeStepsMatchHandRolledLoop) {
  std::mt19937 rng(41);
  for (const Config& c : kConfigs) {
    for (DType dtype : {DType::F32, DType::F64}) {
      for (int64_t n : {int64_t{7}, int64_t{5000}}) {
        SCOPED_TRACE(std::string(c.name) + ", " + demi::dtype_name(dtype) + ", numel " + std::to_string(n));
        const DType state = dtype == DType::F64 ? DType::F64 : DType::F32;
        HostTensor param({n}, dtype), grad({n}, dtype), buf({n}, state);
        ReferenceSgd ref{c, param.randomize(rng, -1.0, 1.0), {}};
        for (int step = 0; step < 3; ++step) {
          const std::vector<double> g = grad.randomize(rng, -1.0, 1.0);
          SgdArgs args = make_args(c, step == 0);
          args.param = param.ref();
          args.grad = grad.ref();
          if (c.momentum != 0.0) args.momentum_buffer = buf.ref();  // momentum 0 needs no buffer
          cpu().sgd_step(args);
          ref.step(g, step == 0);
        }
        expect_close(ref.p, param, unit_scale(tolerance(dtype)));
        if (c.momentum != 0.0) expect_close(ref.buf, buf, unit_scale(tolerance(state)));
      }
    }
  }
}

TEST(CpuSgd, MasterWeightsTakeTheStepAndParamIsItsRounding) {
  std::mt19937 rng(42);
  for (const Config& c : kConfigs) {
    for (DType dtype : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(std::string(c.name) + ", " + demi::dtype_name(dtype));
      const int64_t n = 5000;
      HostTensor param({n}, dtype), grad({n}, dtype), master({n}, DType::F32), buf({n}, DType::F32);
      ReferenceSgd ref{c, master.randomize(rng, -1.0, 1.0), {}};
      for (int64_t i = 0; i < n; ++i) param.set(i, master.get(i));
      for (int step = 0; step < 3; ++step) {
        const std::vector<double> g = grad.randomize(rng, -1.0, 1.0);
        SgdArgs args = make_args(c, step == 0);
        args.param = param.ref();
        args.grad = grad.ref();
        args.master = master.ref();
        if (c.momentum != 0.0) args.momentum_buffer = buf.ref();
        cpu().sgd_step(args);
        ref.step(g, step == 0);
      }
      expect_close(ref.p, master, unit_scale(tolerance(DType::F32)));
      HostTensor rounded({n}, dtype);
      for (int64_t i = 0; i < n; ++i) rounded.set(i, master.get(i));  // float -> half, exact rounding
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(param.get(i), rounded.get(i)) << "element " << i;
    }
  }
}

TEST(CpuSgd, RejectsBadArguments) {
  HostTensor param({4}, DType::F32), grad({4}, DType::F32), short_grad({3}, DType::F32);
  HostTensor half_buf({4}, DType::F16), buf({4}, DType::F32), f64({4}, DType::F64);
  const Config momentum = kConfigs[1];
  SgdArgs args = make_args(momentum, true);
  args.param = param.ref();
  args.grad = grad.ref();
  try {
    cpu().sgd_step(args);
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("momentum_buffer"), std::string::npos) << e.what();
  }
  args.momentum_buffer = half_buf.ref();
  EXPECT_THROW(cpu().sgd_step(args), demi::Error);
  args.momentum_buffer = buf.ref();
  args.grad = short_grad.ref();
  EXPECT_THROW(cpu().sgd_step(args), demi::Error);
  args.grad = grad.ref();
  args.nesterov = true;
  args.dampening = 0.1;
  EXPECT_THROW(cpu().sgd_step(args), demi::Error);
  args = make_args(kConfigs[0], true);
  args.param = f64.ref();
  args.grad = f64.ref();
  args.master = buf.ref();
  EXPECT_THROW(cpu().sgd_step(args), demi::Error);
  args = make_args(kConfigs[0], true);
  args.lr = -0.1;
  args.param = param.ref();
  args.grad = grad.ref();
  EXPECT_THROW(cpu().sgd_step(args), demi::Error);
}

}  // namespace

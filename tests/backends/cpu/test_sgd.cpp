// Tests for backends/cpu/sgd.cpp: three steps against a hand-rolled PyTorch-SGD loop in double
// (momentum, dampening, nesterov, weight decay), the fp32 master-weight path, and bad arguments.
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
        expect_close(param, ref.p, unit_scale(rounded(dtype)));
        if (c.momentum != 0.0) expect_close(buf, ref.buf, unit_scale(rounded(state)));
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
      expect_close(master, ref.p, unit_scale(rounded(DType::F32)));
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

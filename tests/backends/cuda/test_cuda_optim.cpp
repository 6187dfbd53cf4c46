// Pins backends/cuda/optim.cu: fused SGD and AdamW steps on cuda:0 against the CPU backend over
// several steps, for fp32 / fp16 / bf16 params with and without an fp32 master, F64, mixed grad
// dtypes, odd sizes, and buffers shifted by one element (the scalar path) or not (packs of 4); plus the
// argument errors. Both sides run the same formulas in the same order; the compilers may contract
// different a * b + c into FMAs, so fp32 agrees within a few ulps, not bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

// One tensor of n elements held twice, on the host (for the CPU backend) and on cuda:0, starting
// `shift` elements into its allocation (shift 1 misaligns packs of 4).
class Mirror {
 public:
  Mirror(const std::vector<double>& values, DType dtype, int shift)
      : dtype_(dtype), n_(static_cast<int64_t>(values.size())), shift_(shift) {
    std::vector<double> padded(static_cast<size_t>(shift), 0.0);
    padded.insert(padded.end(), values.begin(), values.end());
    host_ = encode(padded, dtype);
    device_ = std::make_unique<Buffer>(gpu(), host_);
  }
  TensorRef cpu_ref() { return TensorRef{host_.data() + offset(), {n_}, dtype_}; }
  TensorRef gpu_ref() const { return TensorRef{static_cast<uint8_t*>(device_->data()) + offset(), {n_}, dtype_}; }
  std::vector<double> cpu_values() const { return slice(host_); }
  std::vector<double> gpu_values() const { return slice(device_->read()); }
  DType dtype() const { return dtype_; }
  // Overwrites the values on both sides (a new gradient each step).
  void set(const std::vector<double>& values) {
    std::vector<double> padded(static_cast<size_t>(shift_), 0.0);
    padded.insert(padded.end(), values.begin(), values.end());
    host_ = encode(padded, dtype_);
    gpu().copy_from_host(host_.data(), device_->data(), host_.size());
  }

 private:
  size_t offset() const { return static_cast<size_t>(shift_) * dtype_size(dtype_); }
  std::vector<double> slice(const std::vector<uint8_t>& bytes) const {
    const std::vector<double> all = decode(bytes, dtype_);
    return std::vector<double>(all.begin() + shift_, all.end());
  }

  DType dtype_;
  int64_t n_;
  int shift_;
  std::vector<uint8_t> host_;
  std::unique_ptr<Buffer> device_;
};

void expect_mirror_close(const Mirror& m, const std::string& what) {
  expect_close(m.gpu_values(), m.cpu_values(), device_math(m.dtype()), what);
}

struct ParamCase {
  const char* name;
  DType param, grad;
  bool master;
};

// Same-dtype grads as the optimizers make them, plus mixed grads the kernels also accept.
const std::vector<ParamCase> kParamCases = {
    {"fp32", DType::F32, DType::F32, false},       {"fp16", DType::F16, DType::F16, false},
    {"bf16", DType::BF16, DType::BF16, false},     {"fp16+master", DType::F16, DType::F16, true},
    {"bf16+master", DType::BF16, DType::BF16, true}, {"f64", DType::F64, DType::F64, false},
    {"fp32 param, fp16 grad", DType::F32, DType::F16, false},
    {"fp16 param+master, fp32 grad", DType::F16, DType::F32, true},
    {"f64 param, fp32 grad", DType::F64, DType::F32, false},
};

// Sizes: one element, fewer than a pack, odd, and a few packs of threads with a ragged tail.
const std::vector<int64_t> kSizes = {1, 3, 1031, 4 * 256 * 3 + 5};

struct Layout {
  const char* name;
  int param_shift, grad_shift, state_shift;
};
const std::vector<Layout> kLayouts = {
    {"aligned", 0, 0, 0}, {"all shifted", 1, 1, 1}, {"grad shifted", 0, 1, 0}, {"state shifted", 0, 0, 1}};

DType state_dtype(DType param) { return param == DType::F64 ? DType::F64 : DType::F32; }

struct SgdConfig {
  const char* name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

TEST(CudaOptim, SgdMatchesCpuOverSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<SgdConfig> configs = {
      {"plain", 0.1, 0.0, 0.0, 0.0, false},
      {"weight decay", 0.1, 0.0, 0.0, 0.05, false},
      {"momentum", 0.1, 0.9, 0.0, 0.0, false},
      {"momentum+dampening+decay", 0.05, 0.9, 0.1, 0.01, false},
      {"nesterov+decay", 0.1, 0.9, 0.0, 0.01, true},
  };
  for (const SgdConfig& cfg : configs) {
    for (const ParamCase& pc : kParamCases) {
      for (const int64_t n : kSizes) {
        for (const Layout& layout : kLayouts) {
          std::ostringstream name;
          name << "sgd " << cfg.name << " " << pc.name << " n=" << n << " " << layout.name;
          SCOPED_TRACE(name.str());
          const size_t count = static_cast<size_t>(n);
          const std::vector<double> init = uniform(count, -1.0, 1.0, 1);
          Mirror param(init, pc.param, layout.param_shift);
          Mirror grad(uniform(count, -1.0, 1.0, 2), pc.grad, layout.grad_shift);
          // The master starts as the param's exact value, as the optimizer makes it.
          Mirror master(decode(encode(init, pc.param), pc.param), DType::F32, layout.state_shift);
          Mirror buf(std::vector<double>(count, 0.0), state_dtype(pc.param), layout.state_shift);
          for (int step = 1; step <= 3; ++step) {
            if (step > 1) grad.set(uniform(count, -1.0, 1.0, 2 + step));
            SgdArgs args;
            args.lr = cfg.lr;
            args.momentum = cfg.momentum;
            args.dampening = cfg.dampening;
            args.weight_decay = cfg.weight_decay;
            args.nesterov = cfg.nesterov;
            args.first_step = step == 1;
            SgdArgs on_gpu = args, on_cpu = args;
            on_gpu.param = param.gpu_ref();
            on_gpu.grad = grad.gpu_ref();
            on_cpu.param = param.cpu_ref();
            on_cpu.grad = grad.cpu_ref();
            if (cfg.momentum != 0.0) {
              on_gpu.momentum_buffer = buf.gpu_ref();
              on_cpu.momentum_buffer = buf.cpu_ref();
            }
            if (pc.master) {
              on_gpu.master = master.gpu_ref();
              on_cpu.master = master.cpu_ref();
            }
            gpu().sgd_step(on_gpu);
            cpu().sgd_step(on_cpu);
            const std::string at = name.str() + " step " + std::to_string(step);
            expect_mirror_close(param, at + " param");
            if (cfg.momentum != 0.0) expect_mirror_close(buf, at + " momentum_buffer");
            if (pc.master) expect_mirror_close(master, at + " master");
          }
        }
      }
    }
  }
}

struct AdamWConfig {
  const char* name;
  double lr, beta1, beta2, eps, weight_decay;
};

TEST(CudaOptim, AdamWMatchesCpuOverSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<AdamWConfig> configs = {
      {"defaults", 1e-3, 0.9, 0.999, 1e-8, 1e-2},
      {"lr 1e-2, beta2 0.95, eps 1e-6, no decay", 1e-2, 0.9, 0.95, 1e-6, 0.0},
  };
  for (const AdamWConfig& cfg : configs) {
    for (const ParamCase& pc : kParamCases) {
      for (const int64_t n : kSizes) {
        for (const Layout& layout : kLayouts) {
          std::ostringstream name;
          name << "adamw " << cfg.name << " " << pc.name << " n=" << n << " " << layout.name;
          SCOPED_TRACE(name.str());
          const size_t count = static_cast<size_t>(n);
          const std::vector<double> init = uniform(count, -1.0, 1.0, 3);
          Mirror param(init, pc.param, layout.param_shift);
          // Gradients spanning magnitudes, so that sqrt(v) meets eps somewhere.
          std::vector<double> g0 = uniform(count, -1.0, 1.0, 4);
          for (size_t i = 0; i < count; i += 3) g0[i] *= 1e-4;
          Mirror grad(g0, pc.grad, layout.grad_shift);
          Mirror master(decode(encode(init, pc.param), pc.param), DType::F32, layout.state_shift);
          Mirror exp_avg(std::vector<double>(count, 0.0), state_dtype(pc.param), layout.state_shift);
          Mirror exp_avg_sq(std::vector<double>(count, 0.0), state_dtype(pc.param), layout.state_shift);
          for (int step = 1; step <= 4; ++step) {
            if (step > 1) grad.set(uniform(count, -1.0, 1.0, 4 + step));
            AdamWArgs args;
            args.lr = cfg.lr;
            args.beta1 = cfg.beta1;
            args.beta2 = cfg.beta2;
            args.eps = cfg.eps;
            args.weight_decay = cfg.weight_decay;
            args.step = step;
            AdamWArgs on_gpu = args, on_cpu = args;
            on_gpu.param = param.gpu_ref();
            on_gpu.grad = grad.gpu_ref();
            on_gpu.exp_avg = exp_avg.gpu_ref();
            on_gpu.exp_avg_sq = exp_avg_sq.gpu_ref();
            on_cpu.param = param.cpu_ref();
            on_cpu.grad = grad.cpu_ref();
            on_cpu.exp_avg = exp_avg.cpu_ref();
            on_cpu.exp_avg_sq = exp_avg_sq.cpu_ref();
            if (pc.master) {
              on_gpu.master = master.gpu_ref();
              on_cpu.master = master.cpu_ref();
            }
            gpu().adamw_step(on_gpu);
            cpu().adamw_step(on_cpu);
            const std::string at = name.str() + " step " + std::to_string(step);
            expect_mirror_close(param, at + " param");
            expect_mirror_close(exp_avg, at + " exp_avg");
            expect_mirror_close(exp_avg_sq, at + " exp_avg_sq");
            if (pc.master) expect_mirror_close(master, at + " master");
          }
        }
      }
    }
  }
}

// A GradScaler's skip decided on the device: found_inf 1 leaves everything as it was, the AdamW step
// count on the device included; the count and the bias corrections derived from it on the device
// match the CPU's over a run with a skipped step in the middle.
TEST(CudaOptim, FoundInfSkipsOnTheDeviceAndAdamWCountsItsStepsThere) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const size_t n = 1031;
  const std::vector<double> init = uniform(n, -1.0, 1.0, 3);
  Mirror param(init, DType::BF16, 0), grad(uniform(n, -1.0, 1.0, 4), DType::BF16, 0);
  Mirror master(decode(encode(init, DType::BF16), DType::BF16), DType::F32, 0);
  Mirror exp_avg(std::vector<double>(n, 0.0), DType::F32, 0), exp_avg_sq(std::vector<double>(n, 0.0), DType::F32, 0);
  Mirror momentum(std::vector<double>(n, 0.0), DType::F32, 0), sgd_param(init, DType::F32, 0);
  Mirror step_count({0.0}, DType::I64, 0), found_inf({0.0}, DType::F32, 0);
  const std::vector<double> flags = {0.0, 1.0, 0.0, 0.0};
  for (size_t k = 0; k < flags.size(); ++k) {
    const std::string at = "step " + std::to_string(k + 1) + (flags[k] != 0.0 ? " (skipped)" : "");
    grad.set(uniform(n, -1.0, 1.0, 5 + static_cast<int>(k)));
    found_inf.set({flags[k]});
    const std::vector<double> param_before = param.gpu_values(), sgd_before = sgd_param.gpu_values();
    AdamWArgs on_gpu, on_cpu;
    for (auto [args, gpu_side] : {std::pair<AdamWArgs*, bool>{&on_gpu, true}, {&on_cpu, false}}) {
      args->param = gpu_side ? param.gpu_ref() : param.cpu_ref();
      args->grad = gpu_side ? grad.gpu_ref() : grad.cpu_ref();
      args->exp_avg = gpu_side ? exp_avg.gpu_ref() : exp_avg.cpu_ref();
      args->exp_avg_sq = gpu_side ? exp_avg_sq.gpu_ref() : exp_avg_sq.cpu_ref();
      args->master = gpu_side ? master.gpu_ref() : master.cpu_ref();
      args->found_inf = gpu_side ? found_inf.gpu_ref() : found_inf.cpu_ref();
      args->step_count = gpu_side ? step_count.gpu_ref() : step_count.cpu_ref();
      args->lr = 1e-2;
    }
    gpu().adamw_step(on_gpu);
    cpu().adamw_step(on_cpu);
    SgdArgs sgd;
    sgd.param = sgd_param.gpu_ref();
    sgd.grad = grad.gpu_ref();
    sgd.momentum_buffer = momentum.gpu_ref();
    sgd.found_inf = found_inf.gpu_ref();
    sgd.lr = 0.1;
    sgd.momentum = 0.9;
    sgd.first_step = k == 0;
    gpu().sgd_step(sgd);
    EXPECT_EQ(step_count.gpu_values(), step_count.cpu_values()) << at;
    expect_mirror_close(param, at + " param");
    expect_mirror_close(master, at + " master");
    expect_mirror_close(exp_avg_sq, at + " exp_avg_sq");
    if (flags[k] != 0.0) {
      EXPECT_EQ(param.gpu_values(), param_before) << at;
      EXPECT_EQ(sgd_param.gpu_values(), sgd_before) << at;
    } else {
      EXPECT_NE(sgd_param.gpu_values(), sgd_before) << at;
    }
  }
  EXPECT_EQ(step_count.gpu_values(), std::vector<double>{3.0});
}

// Optimizer::set_capturable's path: the rate read from a float64 tensor on the device (lr itself
// set to a wrong value that must be ignored) steps bit for bit as the rate passed by value, and
// AdamW's decay 1 - lr * weight_decay, derived on the device then, rounds as the host's.
TEST(CudaOptim, TheRateOnTheDeviceStepsAsTheRatePassedByValue) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const size_t n = 1029;
  const std::vector<double> init = uniform(n, -1.0, 1.0, 8);
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Mirror by_value(init, dtype, 0), from_device(init, dtype, 0), grad(uniform(n, -1.0, 1.0, 9), dtype, 0);
    Mirror m1(std::vector<double>(n, 0.0), DType::F32, 0), v1(std::vector<double>(n, 0.0), DType::F32, 0);
    Mirror m2(std::vector<double>(n, 0.0), DType::F32, 0), v2(std::vector<double>(n, 0.0), DType::F32, 0);
    Mirror steps1({0.0}, DType::I64, 0), steps2({0.0}, DType::I64, 0), rate({0.0}, DType::F64, 0);
    for (const double lr : {3e-3, 7.7e-4, 0.1}) {
      rate.set({lr});
      AdamWArgs a;
      a.grad = grad.gpu_ref();
      a.weight_decay = 0.05;
      AdamWArgs plain = a, device = a;
      plain.param = by_value.gpu_ref();
      plain.exp_avg = m1.gpu_ref();
      plain.exp_avg_sq = v1.gpu_ref();
      plain.step_count = steps1.gpu_ref();
      plain.lr = lr;
      device.param = from_device.gpu_ref();
      device.exp_avg = m2.gpu_ref();
      device.exp_avg_sq = v2.gpu_ref();
      device.step_count = steps2.gpu_ref();
      device.lr = 99.0;
      device.lr_tensor = rate.gpu_ref();
      gpu().adamw_step(plain);
      gpu().adamw_step(device);
      EXPECT_EQ(from_device.gpu_values(), by_value.gpu_values()) << "adamw lr " << lr;
      SgdArgs s;
      s.grad = grad.gpu_ref();
      s.weight_decay = 5e-4;
      SgdArgs sgd_plain = s, sgd_device = s;
      sgd_plain.param = by_value.gpu_ref();
      sgd_plain.lr = lr;
      sgd_device.param = from_device.gpu_ref();
      sgd_device.lr = 99.0;
      sgd_device.lr_tensor = rate.gpu_ref();
      gpu().sgd_step(sgd_plain);
      gpu().sgd_step(sgd_device);
      EXPECT_EQ(from_device.gpu_values(), by_value.gpu_values()) << "sgd lr " << lr;
    }
  }
}

TEST(CudaOptim, EmptyParamIsANoOp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer empty(gpu(), 0);
  SgdArgs sgd;
  sgd.param = empty.ref({0}, DType::F16);
  sgd.grad = empty.ref({0}, DType::F16);
  sgd.lr = 0.1;
  EXPECT_NO_THROW(gpu().sgd_step(sgd));
  AdamWArgs adamw;
  adamw.param = empty.ref({0}, DType::F32);
  adamw.grad = empty.ref({0}, DType::F32);
  adamw.exp_avg = empty.ref({0}, DType::F32);
  adamw.exp_avg_sq = empty.ref({0}, DType::F32);
  EXPECT_NO_THROW(gpu().adamw_step(adamw));
}

TEST(CudaOptim, RejectsBadArguments) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer p(gpu(), 64), g(gpu(), 64), s(gpu(), 64), s2(gpu(), 64), m(gpu(), 64);
  auto sgd = [&] {
    SgdArgs a;
    a.param = p.ref({4}, DType::F32);
    a.grad = g.ref({4}, DType::F32);
    a.momentum_buffer = s.ref({4}, DType::F32);
    a.lr = 0.1;
    a.momentum = 0.9;
    return a;
  };
  EXPECT_NO_THROW(gpu().sgd_step(sgd()));
  SgdArgs a = sgd();
  a.grad = g.ref({5}, DType::F32);
  EXPECT_THROW(gpu().sgd_step(a), Error);  // grad numel
  a = sgd();
  a.lr = -1.0;
  EXPECT_THROW(gpu().sgd_step(a), Error);
  a = sgd();
  a.nesterov = true;
  a.dampening = 0.1;
  EXPECT_THROW(gpu().sgd_step(a), Error);
  a = sgd();
  a.momentum_buffer = TensorRef{};
  EXPECT_THROW(gpu().sgd_step(a), Error);  // momentum without a buffer
  a = sgd();
  a.momentum_buffer = s.ref({4}, DType::F16);
  EXPECT_THROW(gpu().sgd_step(a), Error);  // state must be fp32
  a = sgd();
  a.param = p.ref({4}, DType::F64);
  a.grad = g.ref({4}, DType::F64);
  a.momentum_buffer = s.ref({4}, DType::F64);
  a.master = m.ref({4}, DType::F32);
  EXPECT_THROW(gpu().sgd_step(a), Error);  // no fp32 master for an F64 param
  a = sgd();
  a.param = p.ref({4}, DType::I64);
  EXPECT_THROW(gpu().sgd_step(a), Error);

  auto adamw = [&] {
    AdamWArgs b;
    b.param = p.ref({4}, DType::F16);
    b.grad = g.ref({4}, DType::F16);
    b.exp_avg = s.ref({4}, DType::F32);
    b.exp_avg_sq = s2.ref({4}, DType::F32);
    return b;
  };
  EXPECT_NO_THROW(gpu().adamw_step(adamw()));
  AdamWArgs b = adamw();
  b.exp_avg_sq = s2.ref({4}, DType::F16);
  EXPECT_THROW(gpu().adamw_step(b), Error);
  b = adamw();
  b.beta1 = 1.0;
  EXPECT_THROW(gpu().adamw_step(b), Error);
  b = adamw();
  b.step = 0;
  EXPECT_THROW(gpu().adamw_step(b), Error);
  b = adamw();
  b.master = m.ref({3}, DType::F32);
  EXPECT_THROW(gpu().adamw_step(b), Error);
  b = adamw();
  b.grad = g.ref({4}, DType::U8);
  EXPECT_THROW(gpu().adamw_step(b), Error);
}

}  // namespace
}  // namespace demi::backend

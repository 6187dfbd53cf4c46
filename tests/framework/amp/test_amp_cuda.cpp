// Mixed precision on cuda:0: autocast's output dtypes on CUDA follow the same policy table as on the
// CPU (and a CPU region leaves CUDA ops alone), GradScaler's overflow trace with its state on the
// device, and a short fp16 + GradScaler run that trains and tracks the same run on the CPU.
// Skips (one line) without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "framework/amp/autocast.h"
#include "framework/demi/demi.h"

namespace demi {
namespace {

using backend::cuda_test::kNoDevice;

using amp::AutocastGuard;
using amp::GradScaler;

// The ops whose autocast category decides their output dtype, called on `device`.
std::map<std::string, std::function<Tensor()>> calls_on(const Device& device) {
  Generator gen(0);
  const Tensor x = randn({2, 3, 6, 6}, gen).to(device), v = randn({4, 5}, gen).to(device);
  const Tensor w = randn({5, 5}, gen).to(device), k = randn({2, 3, 3, 3}, gen).to(device);
  const Tensor labels = tensor(std::vector<int64_t>{1, 0, 4, 2}, {4}).to(device);
  return {
      {"matmul", [=] { return matmul(v, w); }},
      {"linear", [=] { return linear(v, w); }},
      {"conv2d", [=] { return conv2d(x, k); }},
      {"softmax", [=] { return softmax(v); }},
      {"log_softmax", [=] { return log_softmax(v); }},
      {"cross_entropy", [=] { return cross_entropy(v, labels); }},
      {"exp", [=] { return exp(v); }},
      {"sum", [=] { return sum(v); }},
      {"add", [=] { return v + w.slice(0, 4); }},
      {"relu", [=] { return relu(v); }},
      {"max_pool2d", [=] { return max_pool2d(x, 2); }},
      {"batch_norm", [=] { return batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), {true}); }},
  };
}

TEST(AmpCuda, AutocastOutputDtypesMatchTheCpuPolicy) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const auto on_cpu = calls_on(Device::cpu()), on_gpu = calls_on(Device::cuda(0));
  for (DType lower : {DType::F16, DType::BF16}) {
    for (const auto& [name, call] : on_gpu) {
      SCOPED_TRACE(name + " under " + dtype_name(lower));
      DType want, got;
      {
        AutocastGuard guard(Device::Kind::CPU, lower);
        want = on_cpu.at(name)().dtype();
      }
      {
        AutocastGuard guard(Device::Kind::CUDA, lower);
        got = call().dtype();
      }
      EXPECT_EQ(got, want);
      AutocastGuard cpu_only(Device::Kind::CPU, lower);  // another device kind's region: no effect
      EXPECT_EQ(call().dtype(), DType::F32);
    }
  }
  AutocastGuard guard(Device::Kind::CUDA, DType::F16);
  EXPECT_EQ(on_gpu.at("matmul")().dtype(), DType::F16);  // the table says GEMMs go to half
  EXPECT_EQ(on_gpu.at("softmax")().dtype(), DType::F32);  // and softmax stays fp32
}

// One iteration whose true gradient for w is 2.0 and whose backward passes through fp16.
bool probe_step(Tensor& w, optim::SGD& opt, GradScaler& scaler) {
  opt.zero_grad();
  const Tensor loss = sum(w.to(DType::F16) * 2.0);
  scaler.scale(loss).backward();
  scaler.step(opt);
  const bool stepped = !scaler.last_step_skipped();
  scaler.update();
  return stepped;
}

TEST(AmpCuda, GradScalerOverflowTraceOnTheDevice) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Tensor w = ones({1}, DType::F32, Device::cuda(0)).requires_grad_();
  optim::SGD::Options o;
  o.lr = 0.01;
  optim::SGD opt({w}, o);
  GradScaler scaler;
  EXPECT_FALSE(probe_step(w, opt, scaler));  // 2 * 65536 = inf in fp16: skipped, scale halves
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(w.item<float>(), 1.0f);  // untouched by the skipped step
  EXPECT_FALSE(probe_step(w, opt, scaler));  // 65536: still inf
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_TRUE(probe_step(w, opt, scaler));  // 32768 fits
  EXPECT_EQ(w.grad().item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(w.item<float>(), 1.0f - 0.01f * 2.0f);
  EXPECT_EQ(scaler.get_growth_tracker(), 1);
  EXPECT_EQ(scaler.steps_skipped(), 2);
}

// A conv + linear classifier on fixed random data, fp16 autocast + GradScaler + SGD, on `device`.
std::vector<double> fp16_losses(const Device& device, int steps) {
  Generator gen(5);
  const Tensor x = randn({64, 3, 8, 8}, gen).to(device);
  std::vector<int64_t> y(64);
  for (int i = 0; i < 64; ++i) y[i] = (i * 3) % 10;
  const Tensor labels = tensor(y, {64}).to(device);
  Tensor w1 = (randn({8, 3, 3, 3}, gen) * 0.3).to(device).requires_grad_();
  Tensor b1 = zeros({8}, DType::F32, device).requires_grad_();
  Tensor w2 = (randn({10, 512}, gen) * 0.05).to(device).requires_grad_();
  Tensor b2 = zeros({10}, DType::F32, device).requires_grad_();
  optim::SGD::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD opt({w1, b1, w2, b2}, o);
  GradScaler scaler;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard guard(device.kind(), DType::F16);
      const Tensor h = relu(conv2d(x, w1, b1, 1, 1)).reshape({64, 512});
      loss = cross_entropy(linear(h, w2, b2), labels);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

TEST(AmpCuda, Fp16TrainingWithTheScalerTracksTheCpu) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const int steps = 30;
  const std::vector<double> gpu = fp16_losses(Device::cuda(0), steps);
  const std::vector<double> cpu = fp16_losses(Device::cpu(), steps);
  EXPECT_LT(gpu.back(), 0.5 * gpu.front()) << "fp16 training on CUDA did not learn";
  // Rounding differs (tensor-core accumulation order), so the trajectories drift slowly apart;
  // a broken kernel puts them apart at once.
  // The first 10 losses (cross-entropies, positive) within 2% + 1e-3.
  const std::vector<double> first_gpu(gpu.begin(), gpu.begin() + 10), first_cpu(cpu.begin(), cpu.begin() + 10);
  test::expect_close(first_gpu, first_cpu, test::Tolerance{0.02, 1e-3}, "loss of the first 10 steps");
}

}  // namespace
}  // namespace demi

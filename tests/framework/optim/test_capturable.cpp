// Optimizer::set_capturable: SGD and AdamW read each group's learning rate from a float64 tensor
// on the parameters' device (what a captured CUDA graph needs to follow a schedule). The steps are
// bit-identical to the plain ones, on the CPU as on CUDA, while a scheduler moves the rate; the
// optimizers that compute their step on the host refuse it; the kernels check the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

// Six steps of `make`'s optimizer on two parameters of `dtype` under a warmup + cosine schedule;
// the parameters (and, for half ones, the fp32 masters) after them.
std::vector<Tensor> train(const MakeOptimizer& make, DType dtype, bool capturable) {
  Generator gen(11);
  std::vector<Tensor> params = {randn({5, 7}, gen).to(dtype).requires_grad_(),
                                randn({7}, gen).to(dtype).requires_grad_()};
  std::unique_ptr<optim::Optimizer> opt = make(params);
  opt->set_capturable(capturable);
  optim::CosineWithWarmup schedule(*opt, 2, 6);
  for (int step = 0; step < 6; ++step) {
    for (Tensor& p : params) p.set_grad(randn(p.shape(), gen).to(dtype));
    opt->step();
    schedule.step();
  }
  std::vector<Tensor> out = params;
  for (const Tensor& p : params) {
    if (opt->master_of(p).defined()) out.push_back(opt->master_of(p));
  }
  return out;
}

void expect_bit_identical(const MakeOptimizer& make) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    const std::vector<Tensor> plain = train(make, dtype, false), capturable = train(make, dtype, true);
    ASSERT_EQ(plain.size(), capturable.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      EXPECT_EQ(plain[k].to(DType::F64).to_vector<double>(), capturable[k].to(DType::F64).to_vector<double>())
          << dtype_name(dtype) << " tensor " << k;
    }
  }
}

TEST(Capturable, SgdStepsBitIdenticalWithTheRateOnTheDevice) {
  expect_bit_identical([](const std::vector<Tensor>& params) {
    optim::SGD::Options o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = true;
    o.weight_decay = 5e-4;
    return std::make_unique<optim::SGD>(params, o);
  });
}

TEST(Capturable, AdamWStepsBitIdenticalWithTheRateOnTheDevice) {
  expect_bit_identical([](const std::vector<Tensor>& params) {
    optim::AdamW::Options o;
    o.lr = 3e-3;
    o.weight_decay = 0.05;
    return std::make_unique<optim::AdamW>(params, o);
  });
}

TEST(Capturable, TheRateTensorFollowsSetLr) {
  Tensor w = ones({4}).requires_grad_();
  optim::SGD sgd({w}, 0.5);
  sgd.set_capturable(true);
  w.set_grad(ones({4}));
  sgd.step();
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 0.5f));
  sgd.set_lr(0, 0.25);  // no explicit sync: the step writes the new rate first
  sgd.step();
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 0.25f));
  sgd.set_capturable(false);
  sgd.step();
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(Capturable, OptimizersThatStepOnTheHostRefuseIt) {
  Tensor m = ones({3, 3}).requires_grad_();
  optim::Muon muon({m}, optim::Muon::Options{});
  EXPECT_FALSE(muon.supports_capturable());
  EXPECT_THAT(error_of([&] { muon.set_capturable(true); }),
              HasSubstr("set_capturable: this optimizer computes its step on the host"));
}

// The kernels take the rate from the tensor, not from `lr` (which the optimizers also fill in).
TEST(Capturable, KernelsReadTheRateFromTheTensor) {
  Tensor p = ones({5}), g = full({5}, 2.0);
  const Tensor rate = full({}, 0.25, DType::F64);
  backend::SgdArgs sgd;
  sgd.param = p.ref();
  sgd.grad = g.ref();
  sgd.lr = 99.0;
  sgd.lr_tensor = rate.ref();
  kernels(p).sgd_step(sgd);
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>(5, 0.5f));  // 1 - 0.25 * 2

  auto adamw = [](double lr, const Tensor& lr_tensor) {
    Tensor q = ones({5}), grad = full({5}, 2.0), m = zeros({5}), v = zeros({5});
    const Tensor steps = zeros({}, DType::I64);
    backend::AdamWArgs a;
    a.param = q.ref();
    a.grad = grad.ref();
    a.exp_avg = m.ref();
    a.exp_avg_sq = v.ref();
    a.step_count = steps.ref();
    a.lr = lr;
    a.weight_decay = 0.1;
    if (lr_tensor.defined()) a.lr_tensor = lr_tensor.ref();
    kernels(q).adamw_step(a);
    return q.to_vector<float>();
  };
  EXPECT_EQ(adamw(99.0, full({}, 0.01, DType::F64)), adamw(0.01, Tensor()));
  EXPECT_NE(adamw(99.0, Tensor()), adamw(0.01, Tensor()));
}

TEST(Capturable, KernelsCheckTheRateTensor) {
  Tensor p = ones({3}), g = ones({3});
  const Tensor wrong = full({}, 0.1, DType::F32);
  backend::SgdArgs sgd;
  sgd.param = p.ref();
  sgd.grad = g.ref();
  sgd.lr_tensor = wrong.ref();
  EXPECT_THAT(error_of([&] { kernels(p).sgd_step(sgd); }),
              HasSubstr("sgd_step: lr_tensor must be a one-element float64 tensor, got float32"));
  Tensor m = zeros({3}), v = zeros({3});
  const Tensor rate = full({}, 0.1, DType::F64);
  backend::AdamWArgs adamw;
  adamw.param = p.ref();
  adamw.grad = g.ref();
  adamw.exp_avg = m.ref();
  adamw.exp_avg_sq = v.ref();
  adamw.lr_tensor = rate.ref();
  EXPECT_THAT(error_of([&] { kernels(p).adamw_step(adamw); }), HasSubstr("adamw_step: lr_tensor needs step_count"));
}

}  // namespace
}  // namespace demi

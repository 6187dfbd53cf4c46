// fp32 master weights and optimizer state: the update-underflow fact, AdamW's formula, half
// gradients unscaled into fp32 masters, and skipped steps that touch nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "framework/demi/demi.h"

namespace demi {
namespace {

using amp::GradScaler;
using optim::MasterWeights;

float fp16(float x) { return static_cast<float>(Half(x)); }

TEST(MasterWeights, SmallUpdatesRoundAwayWithoutAMasterAndAccumulateWithOne) {
  const int k = 100;
  for (MasterWeights policy : {MasterWeights::None, MasterWeights::Fp32}) {
    Tensor w = ones({1}, DType::F16).requires_grad_();
    optim::SGD::Options o;
    o.lr = 1e-4;
    o.master_weights = policy;
    optim::SGD opt({w}, o);
    for (int i = 0; i < k; ++i) {
      opt.zero_grad();
      sum(w).backward();  // gradient 1: each step moves w by 1e-4, under half of fp16's spacing at 1
      opt.step();
    }
    if (policy == MasterWeights::None) {
      EXPECT_EQ(w.item<float>(), 1.0f) << "without a master every update rounds away";
      EXPECT_FALSE(opt.master_of(w).defined());
    } else {
      // fp32 rounds each of the k updates by at most half an ulp of 1 (2^-24)
      EXPECT_NEAR(opt.master_of(w).item<float>(), 1.0f - k * 1e-4f, k * std::ldexp(1.0f, -24));
      EXPECT_EQ(w.item<float>(), fp16(opt.master_of(w).item<float>()));
      EXPECT_EQ(w.item<float>(), fp16(1.0f - k * 1e-4f));
    }
  }
}

TEST(MasterWeights, HalfGradientsAreUnscaledIntoFp32Masters) {
  Tensor w = zeros({4}, DType::F16).requires_grad_();  // at 0, a 1e-8 step is visible in fp32
  optim::SGD::Options o;
  o.lr = 1.0;
  optim::SGD opt({w}, o);
  GradScaler scaler;
  // true gradient 1e-8: representable in fp16 only while scaled (6.6e-4); in fp32 after unscaling
  scaler.scale(sum(w * 2e-8).to(DType::F32) * 0.5).backward();
  ASSERT_EQ(w.grad().dtype(), DType::F16);
  scaler.step(opt);
  ASSERT_FALSE(scaler.last_step_skipped());
  const float master = opt.master_of(w).to_vector<float>()[0];
  EXPECT_NEAR(-master, 1e-8f, 1e-3f * 1e-8f);  // the 1e-8 step landed in the fp32 master
  EXPECT_EQ(w.to_vector<float>()[0], 0.0f);    // and rounds to (negative) zero in the fp16 weight
}

TEST(AdamW, MatchesTorchsFormulaForThreeSteps) {
  Tensor w = tensor({0.5f, -2.0f}, {2}).requires_grad_();
  optim::AdamW::Options o;
  o.lr = 0.1;
  o.weight_decay = 0.1;
  optim::AdamW opt({w}, o);
  double p[2] = {0.5, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double g[2] = {3.0, -0.25};
  for (int t = 1; t <= 3; ++t) {
    opt.zero_grad();
    sum(w * tensor({3.0f, -0.25f}, {2})).backward();
    opt.step();
    for (int i = 0; i < 2; ++i) {
      p[i] *= 1 - 0.1 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      p[i] -= 0.1 / (1 - std::pow(0.9, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
    }
  }
  const auto got = w.to_vector<float>();
  EXPECT_NEAR(got[0], p[0], 1e-6);
  EXPECT_NEAR(got[1], p[1], 1e-6);
  EXPECT_EQ(opt.state_dict().at("0.0.step").item<int64_t>(), 3);
  EXPECT_EQ(opt.state_dict().at("0.0.exp_avg").dtype(), DType::F32);
}

TEST(AdamW, SkippedStepLeavesWeightsMastersMomentsAndStepCountsBitIdentical) {
  Tensor w = tensor({0.5f, -1.5f, 2.0f}, {3}, DType::BF16).requires_grad_();
  optim::AdamW opt({w}, {});
  GradScaler scaler;
  auto iteration = [&](float x0) {
    opt.zero_grad();
    scaler.scale(sum(w * tensor({x0, 1.0f, -1.0f}, {3}, DType::BF16)).to(DType::F32)).backward();
    scaler.step(opt);
    const bool stepped = !scaler.last_step_skipped();
    scaler.update();
    return stepped;
  };
  ASSERT_TRUE(iteration(2.0f));
  const auto weights = w.to_vector<float>();
  const auto master = opt.master_of(w).to_vector<float>();
  const auto state = opt.state_dict();
  const auto m = state.at("0.0.exp_avg").to_vector<float>(), v = state.at("0.0.exp_avg_sq").to_vector<float>();
  ASSERT_FALSE(iteration(INFINITY));
  EXPECT_EQ(w.to_vector<float>(), weights);
  EXPECT_EQ(opt.master_of(w).to_vector<float>(), master);
  const auto after = opt.state_dict();
  EXPECT_EQ(after.at("0.0.exp_avg").to_vector<float>(), m);
  EXPECT_EQ(after.at("0.0.exp_avg_sq").to_vector<float>(), v);
  EXPECT_EQ(after.at("0.0.step").item<int64_t>(), 1);
}

TEST(Optimizers, HalfParametersWithoutAScalerStepThroughTheirMasters) {
  // bf16 training without a scaler: the half gradient is read directly, the master takes the step.
  Tensor w = ones({2}, DType::BF16).requires_grad_();
  optim::SGD::Options o;
  o.lr = 1e-3;
  optim::SGD opt({w}, o);
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    sum(w).backward();
    opt.step();
  }
  EXPECT_NEAR(opt.master_of(w).to_vector<float>()[0], 0.99f, 1e-6f);
}

}  // namespace
}  // namespace demi

namespace demi {
namespace {

// Resuming: an optimizer loaded from another's state_dict continues bit for bit.
TEST(Optimizers, StateDictRoundTripContinuesIdentically) {
  auto run = [](optim::Optimizer& opt, Tensor& w, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      sum(w * w).to(DType::F32).backward();
      opt.step();
    }
  };
  for (int which = 0; which < 2; ++which) {
    Tensor a = tensor({0.5f, -1.5f, 2.0f}, {3}, DType::BF16).requires_grad_();
    Tensor b = tensor({0.0f, 0.0f, 0.0f}, {3}, DType::BF16).requires_grad_();
    std::unique_ptr<optim::Optimizer> oa, ob;
    if (which == 0) {
      optim::SGD::Options o;
      o.lr = 0.1;
      o.momentum = 0.9;
      oa = std::make_unique<optim::SGD>(std::vector<Tensor>{a}, o);
      ob = std::make_unique<optim::SGD>(std::vector<Tensor>{b}, o);
    } else {
      oa = std::make_unique<optim::AdamW>(std::vector<Tensor>{a}, optim::AdamW::Options{});
      ob = std::make_unique<optim::AdamW>(std::vector<Tensor>{b}, optim::AdamW::Options{});
    }
    run(*oa, a, 3);
    {
      NoGradGuard no_grad;
      kernels(b).copy(a.data_ptr(), b.data_ptr(), a.nbytes());
    }
    ob->load_state_dict(oa->state_dict());
    run(*oa, a, 2);
    run(*ob, b, 2);
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << (which == 0 ? "SGD" : "AdamW");
    EXPECT_EQ(oa->master_of(a).to_vector<float>(), ob->master_of(b).to_vector<float>());
  }
  optim::SGD sgd({ones({2}).requires_grad_()}, {});
  try {
    sgd.load_state_dict({{"7.0.momentum_buffer", zeros({2})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key '7.0.momentum_buffer' names no parameter of this optimizer"), std::string::npos);
  }
}

}  // namespace
}  // namespace demi

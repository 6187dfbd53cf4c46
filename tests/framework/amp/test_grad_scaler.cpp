// GradScaler: the facts of loss scaling reproduced step by step (the overflow trace, a 1e-8
// gradient rescued, clipping order, skipped steps, accumulation) and PyTorch's state machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using amp::GradScaler;
using testing::HasSubstr;

using test::error_of;

optim::SGD sgd(const std::vector<Tensor>& params, double lr, double momentum = 0.0) {
  optim::SGD::Options o;
  o.lr = lr;
  o.momentum = momentum;
  return optim::SGD(params, o);
}

// One iteration whose true gradient for w is 2.0 and whose backward passes through fp16.
bool probe_step(Tensor& w, optim::SGD& opt, GradScaler& scaler) {
  opt.zero_grad();
  const Tensor loss = sum(w.to(DType::F16) * 2.0);  // fp16 all the way: the scaled gradient is 2 * S in fp16
  scaler.scale(loss).backward();
  scaler.step(opt);
  const bool stepped = !scaler.last_step_skipped();
  scaler.update();
  return stepped;
}

TEST(GradScaler, ScaleTraceOfGradientTwoThroughFp16) {
  Tensor w = ones({1}).requires_grad_();
  auto opt = sgd({w}, 0.01);
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_FALSE(probe_step(w, opt, scaler));  // 2 * 65536 = inf in fp16: skipped
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(w.item<float>(), 1.0f);
  EXPECT_FALSE(probe_step(w, opt, scaler));  // 2 * 32768 = 65536: still inf
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_TRUE(probe_step(w, opt, scaler));  // 2 * 16384 = 32768 fits: stepped
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_EQ(w.grad().item<float>(), 2.0f);  // unscaled exactly (1/16384 is a power of two)
  EXPECT_FLOAT_EQ(w.item<float>(), 1.0f - 0.01f * 2.0f);
  EXPECT_EQ(scaler.get_growth_tracker(), 1);
  for (int i = 1; i < 1999; ++i) ASSERT_TRUE(probe_step(w, opt, scaler)) << "clean step " << i;
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 1999);
  EXPECT_TRUE(probe_step(w, opt, scaler));  // the 2000th clean step grows the scale, once
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  EXPECT_FALSE(probe_step(w, opt, scaler));  // and the next probe overflows again: it hovers below
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_EQ(scaler.steps_skipped(), 3);
  EXPECT_EQ(scaler.steps_taken(), 2000);
  EXPECT_TRUE(scaler.last_step_skipped());
}

TEST(GradScaler, TinyGradientUnderflowsWithoutScalingAndArrivesWithIt) {
  // loss = 0.5 * sum(w_fp16 * 2e-8): the true gradient is 1e-8, below fp16's smallest subnormal.
  auto grad_of = [](bool scaled) {
    Tensor w = ones({4}).requires_grad_();
    auto opt = sgd({w}, 0.0);
    GradScaler::Options o;
    o.enabled = scaled;
    GradScaler scaler(o);
    // fp32 before the 0.5, so the fp16 tensors receive 0.5 * S (fits) rather than S (inf)
    const Tensor loss = sum(w.to(DType::F16) * 2e-8).to(DType::F32) * 0.5;
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    return w.grad().to_vector<float>();
  };
  for (float g : grad_of(false)) EXPECT_EQ(g, 0.0f);
  for (float g : grad_of(true)) EXPECT_NEAR(g, 1e-8f, 1e-3f * 1e-8f);
}

TEST(GradScaler, ClippingScaledGradientsShrinksTheUpdateByTheScale) {
  const Tensor c = tensor({3, 4}, {2});  // gradient [3, 4], norm 5
  auto final_weights = [&](int order) {
    Tensor w = zeros({2}).requires_grad_();
    auto opt = sgd({w}, 1.0);
    GradScaler scaler;
    scaler.scale(sum(w * c)).backward();
    if (order == 0) scaler.clip_grad_norm_(opt, 1.0);      // right: unscale, then clip
    if (order == 1) nn::clip_grad_norm_({w}, 1.0);         // wrong: clips the scaled gradients
    scaler.step(opt);
    return w.to_vector<float>();
  };
  Tensor w32 = zeros({2}).requires_grad_();
  auto opt32 = sgd({w32}, 1.0);
  sum(w32 * c).backward();
  const float norm = nn::clip_grad_norm_({w32}, 1.0).item<float>();
  EXPECT_FLOAT_EQ(norm, 5.0f);
  opt32.step();
  const std::vector<float> right = final_weights(0), wrong = final_weights(1), fp32 = w32.to_vector<float>();
  EXPECT_EQ(right, fp32);
  EXPECT_FLOAT_EQ(fp32[0], -0.6f);
  EXPECT_NEAR(wrong[0] / right[0], 1.0 / 65536, 1e-9);
}

// PyTorch's idiom: scaler.unscale_(opt); nn::clip_grad_norm_(params, max); scaler.step(opt). After
// unscale_, p.grad() must be the true gradient that the step reads, for every parameter dtype, so
// that clipping `params` returns the true norm and clips what the step uses.
struct ClipCase {
  DType dtype;
  optim::MasterWeights masters;
};

TEST(GradScaler, ClippingParamsAfterUnscaleClipsWhatTheStepUses) {
  const std::vector<ClipCase> cases = {{DType::F32, optim::MasterWeights::Fp32},
                                       {DType::BF16, optim::MasterWeights::Fp32},
                                       {DType::F16, optim::MasterWeights::Fp32},
                                       {DType::BF16, optim::MasterWeights::None},
                                       {DType::F16, optim::MasterWeights::None}};
  for (const ClipCase& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) +
                 (c.masters == optim::MasterWeights::Fp32 ? " with fp32 masters" : " without masters"));
    Tensor w = tensor({1.0f, 2.0f}, {2}).to(c.dtype).requires_grad_();
    optim::SGD::Options o;
    o.lr = 1.0;
    o.master_weights = c.masters;
    optim::SGD opt({w}, o);
    GradScaler::Options so;
    so.init_scale = 1024.0;  // scaled gradients [3072, 4096]: exact in both half formats
    GradScaler scaler(so);
    scaler.scale(sum(w * tensor({3.0f, 4.0f}, {2}).to(c.dtype))).backward();  // true gradient [3, 4]

    scaler.unscale_(opt);
    const bool has_master = is_half(c.dtype) && c.masters == optim::MasterWeights::Fp32;
    // The step's gradient: fp32 for a parameter with a master, the parameter's dtype otherwise.
    EXPECT_EQ(w.grad().dtype(), has_master ? DType::F32 : c.dtype);
    EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3.0f, 4.0f}));
    const float norm = nn::clip_grad_norm_(opt.parameters(), 1.0).item<float>();
    EXPECT_EQ(norm, 5.0f);  // the true norm, not 5 * 1024
    scaler.step(opt);
    EXPECT_FALSE(scaler.last_step_skipped());
    scaler.update();

    // Clipped to norm 1: the step moves w by [0.6, 0.8], not by the unclipped [3, 4]. The clipped
    // gradient is held in the step gradient's dtype (rounded there once), the new weight rounded once.
    const Tensor clipped = (tensor({3.0f, 4.0f}, {2}) * (1.0 / (5.0 + 1e-6))).to(has_master ? DType::F32 : c.dtype);
    const std::vector<float> expected = (tensor({1.0f, 2.0f}, {2}) - clipped.to(DType::F32)).to(c.dtype).to_vector<float>();
    const std::vector<float> got = w.to_vector<float>();
    const double tol = c.dtype == DType::F32 ? 1e-6 : 0.0;  // half: the same rounding of the same fp32 value
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
    if (has_master) {
      const std::vector<float> master = opt.master_of(w).to_vector<float>();
      EXPECT_NEAR(master[0], 0.4f, 1e-6);
      EXPECT_NEAR(master[1], 1.2f, 1e-6);
    }
  }
}

TEST(GradScaler, UnscaleShowsAHalfParametersTinyTrueGradientInItsFp32Grad) {
  // fp16 weights with fp32 masters: the true gradient 1e-8 is below fp16's smallest subnormal; it
  // lives in the fp32 master gradient, which p.grad() shows after unscale_.
  Tensor w = ones({4}, DType::F16).requires_grad_();
  auto opt = sgd({w}, 0.0);
  GradScaler scaler;
  const Tensor loss = sum(w * 2e-8).to(DType::F32) * 0.5;
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  for (float g : w.grad().to_vector<float>()) EXPECT_NEAR(g, 1e-8f, 1e-3f * 1e-8f);
}

TEST(GradScaler, BackwardIntoAnUnscaledFp32GradIsAClearError) {
  Tensor w = ones({2}, DType::BF16).requires_grad_();
  auto opt = sgd({w}, 0.1);
  GradScaler scaler;
  scaler.scale(sum(w)).backward();
  scaler.unscale_(opt);
  EXPECT_THAT(error_of([&] { scaler.scale(sum(w)).backward(); }),
              HasSubstr("run every backward() of a step before unscale_"));
}

TEST(GradScaler, SkippedStepLeavesWeightsAndMomentsBitIdentical) {
  Tensor w = tensor({0.5f, -1.5f}, {2}).requires_grad_();
  auto opt = sgd({w}, 0.1, 0.9);
  GradScaler scaler;
  auto iteration = [&](float x0) {
    opt.zero_grad();
    scaler.scale(sum(w * tensor({x0, 1.0f}, {2}))).backward();
    scaler.step(opt);
    const bool stepped = !scaler.last_step_skipped();
    scaler.update();
    return stepped;
  };
  ASSERT_TRUE(iteration(2.0f));
  const std::vector<float> weights = w.to_vector<float>();
  const std::vector<float> momentum = opt.state_dict().at("0.0.momentum_buffer").to_vector<float>();
  ASSERT_FALSE(iteration(INFINITY));
  EXPECT_EQ(w.to_vector<float>(), weights);
  EXPECT_EQ(opt.state_dict().at("0.0.momentum_buffer").to_vector<float>(), momentum);
  EXPECT_EQ(scaler.steps_taken(), 1);
  EXPECT_EQ(scaler.steps_skipped(), 1);
  ASSERT_FALSE(iteration(NAN));
  EXPECT_EQ(w.to_vector<float>(), weights);
  EXPECT_EQ(scaler.consecutive_skips(), 2);
}

TEST(GradScaler, AccumulationOverFourMicroBatchesEqualsOneBigBatch) {
  Generator gen(3);
  const Tensor x = randn({16, 6}, gen);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 3);
  const Tensor y = tensor(labels, {16});
  nn::Linear big({6, 3}, gen);
  nn::Linear acc(6, 3);
  acc.load_state_dict(big.state_dict());

  auto opt_big = sgd(big.parameters(), 0.5);
  cross_entropy(big(x), y).backward();
  opt_big.step();

  auto opt_acc = sgd(acc.parameters(), 0.5);
  GradScaler scaler;
  for (int k = 0; k < 4; ++k) {
    const Tensor loss = cross_entropy(acc(x.slice(4 * k, 4 * k + 4)), y.slice(4 * k, 4 * k + 4)) / 4.0;
    scaler.scale(loss).backward();
  }
  scaler.step(opt_acc);
  ASSERT_FALSE(scaler.last_step_skipped());
  scaler.update();
  const auto a = big.weight.to_vector<float>(), b = acc.weight.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f * (1 + std::abs(a[i])));
}

TEST(GradScaler, UnscaleInsideTheAccumulationLoopIsAnError) {
  Tensor w = ones({2}).requires_grad_();
  auto opt = sgd({w}, 0.1);
  GradScaler scaler;
  scaler.scale(sum(w)).backward();
  scaler.unscale_(opt);
  scaler.scale(sum(w)).backward();
  EXPECT_THAT(error_of([&] { scaler.unscale_(opt); }),
              HasSubstr("unscale_() has already been called on this optimizer since the last update()"));
}

TEST(GradScaler, StateMachineErrorsMatchPyTorch) {
  Tensor w = ones({2}).requires_grad_();
  auto opt = sgd({w}, 0.1);
  GradScaler scaler;
  EXPECT_THAT(error_of([&] { scaler.unscale_(opt); }), HasSubstr("did not call scaler.scale(loss).backward()"));
  EXPECT_THAT(error_of([&] { GradScaler().update(); }), HasSubstr("no inf checks were recorded prior to update()"));
  scaler.scale(sum(w)).backward();
  scaler.step(opt);
  EXPECT_THAT(error_of([&] { scaler.unscale_(opt); }), HasSubstr("unscale_() is being called after step()"));
  EXPECT_THAT(error_of([&] { scaler.step(opt); }), HasSubstr("step() has already been called since the last update()"));
  scaler.update();
  opt.zero_grad();
  scaler.scale(sum(w)).backward();
  scaler.step(opt);  // a new iteration after update()
  EXPECT_FALSE(scaler.last_step_skipped());
}

TEST(GradScaler, HalfGradientsOfBothFormatsAreUnscaledInPlace) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    Tensor w = ones({3}, dtype).requires_grad_();
    optim::SGD::Options o;
    o.master_weights = optim::MasterWeights::None;  // no fp32 master to unscale into: in place
    optim::SGD opt({w}, o);
    GradScaler scaler;
    scaler.scale(zeros({}));  // creates the state, then a scale that fits both formats
    scaler.update(1024.0);
    scaler.scale(sum(w * 0.25)).backward();
    EXPECT_EQ(w.grad().dtype(), dtype);
    scaler.unscale_(opt);
    for (float g : w.grad().to_vector<float>()) EXPECT_EQ(g, 0.25f) << dtype_name(dtype);
  }
}

TEST(GradScaler, DisabledIsAPassThrough) {
  Tensor w = ones({2}).requires_grad_();
  auto opt = sgd({w}, 0.5);
  GradScaler::Options o;
  o.enabled = false;
  GradScaler scaler(o);
  const Tensor loss = sum(w);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  scaler.unscale_(opt);  // no state machine when disabled
  scaler.step(opt);
  EXPECT_FALSE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, StateDictRoundTripsWithPyTorchsKeys) {
  Tensor w = ones({1}).requires_grad_();
  auto opt = sgd({w}, 0.01);
  GradScaler a;
  probe_step(w, opt, a);
  probe_step(w, opt, a);
  probe_step(w, opt, a);
  const auto state = a.state_dict();
  EXPECT_EQ(state.at("scale"), 16384.0);
  EXPECT_EQ(state.at("_growth_tracker"), 1.0);
  EXPECT_EQ(state.at("growth_factor"), 2.0);
  EXPECT_EQ(state.at("backoff_factor"), 0.5);
  EXPECT_EQ(state.at("growth_interval"), 2000.0);
  GradScaler b;
  b.load_state_dict(state);
  EXPECT_EQ(b.get_scale(), 16384.0);
  EXPECT_EQ(b.get_growth_tracker(), 1);
  EXPECT_THAT(error_of([&] { b.load_state_dict({}); }), HasSubstr("saved from a disabled GradScaler"));
}

// Loaded before the first scale(), the values wait for it and the state is made on the loss's
// device then (a CUDA run resuming from a checkpoint); loaded later, they are written in place.
TEST(GradScaler, LoadedStateStartsAtTheFirstScaleOrIsWrittenInPlace) {
  GradScaler saved;
  saved.scale(ones({}));
  saved.update(512.0);
  std::map<std::string, double> state = saved.state_dict();
  state["_growth_tracker"] = 3.0;
  GradScaler fresh;
  fresh.load_state_dict(state);
  EXPECT_EQ(fresh.scale(ones({})).item<float>(), 512.0f);
  EXPECT_EQ(fresh.get_growth_tracker(), 3);
  state["scale"] = 64.0;
  fresh.load_state_dict(state);
  EXPECT_EQ(fresh.get_scale(), 64.0);
  EXPECT_EQ(fresh.scale(ones({})).item<float>(), 64.0f);
}

TEST(GradScaler, WarnsOnceWhenTheScaleCollapses) {
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Tensor w = ones({1}).requires_grad_();
  auto opt = sgd({w}, 0.1);
  GradScaler scaler;
  for (int i = 0; i < 40; ++i) {
    opt.zero_grad();
    scaler.scale(sum(w * INFINITY)).backward();
    scaler.step(opt);
    scaler.update();
    scaler.get_scale();  // a loop that logs the scale: the warning comes with that read, not the step
  }
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 1u);
  // 17 skips take 65536 below 1, which warns before the 20-skip limit
  EXPECT_THAT(warnings[0], HasSubstr("17 steps in a row were skipped"));
  EXPECT_THAT(warnings[0], HasSubstr("the scale is now 0.5"));
  EXPECT_THAT(warnings[0], HasSubstr("lower the learning rate"));
}

TEST(GradScaler, WarnsAfterTheConfiguredRunOfSkipsWhileTheScaleIsStillLarge) {
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Tensor w = ones({1}).requires_grad_();
  auto opt = sgd({w}, 0.1);
  GradScaler::Options o;
  o.init_scale = std::ldexp(1.0, 40);
  GradScaler scaler(o);
  for (int i = 0; i < 25; ++i) {
    opt.zero_grad();
    scaler.scale(sum(w * INFINITY)).backward();
    scaler.step(opt);
    scaler.update();
    scaler.get_scale();  // a loop that logs the scale: the warning comes with that read, not the step
  }
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("20 steps in a row were skipped"));
}

}  // namespace
}  // namespace demi

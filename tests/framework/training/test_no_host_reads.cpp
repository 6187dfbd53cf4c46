// A training step makes no host read: TrainStep::run decides skips (GradScaler's found_inf, a
// non-finite loss) and clipping on the device, SGD and AdamW skip on the device, and the results
// stay tensors until read. Counted with demi::host_reads() on the CPU device, where it holds the
// same as on a GPU; the skips it decides are checked to change nothing, the AdamW step count included.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/demi/demi.h"

namespace demi {
namespace {

struct Net {
  Generator gen{5};
  nn::Sequential seq;
  Net() {
    seq.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1}, gen)
        .emplace<nn::BatchNorm2d>(8)
        .emplace<nn::ReLU>()
        .emplace<nn::MaxPool2d>(2)
        .emplace<nn::Flatten>()
        .emplace<nn::Linear>(nn::Linear::Options{8 * 4 * 4, 10}, gen);
  }
  std::vector<std::vector<float>> weights() {
    std::vector<std::vector<float>> w;
    for (const Tensor& p : seq.parameters()) w.push_back(p.to(DType::F32).to_vector<float>());
    return w;
  }
};

// Sync debug mode Error for a scope: any host read inside throws, naming it.
struct NoReadsAllowed {
  NoReadsAllowed() { set_sync_debug_mode(SyncDebugMode::Error); }
  ~NoReadsAllowed() { set_sync_debug_mode(SyncDebugMode::Default); }
};

struct Case {
  std::string name;
  DType dtype;
  bool adamw;
  double clip;
  int micro_batches;
};

std::unique_ptr<optim::Optimizer> make_optimizer(const Case& c, nn::Module& net) {
  if (c.adamw) return std::make_unique<optim::AdamW>(net.parameters(), 1e-3);
  optim::SGD::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  return std::make_unique<optim::SGD>(net.parameters(), o);
}

TEST(TrainStep, AStepMakesNoHostReadAndASkipChangesNothing) {
  const std::vector<Case> cases = {{"fp32 SGD", DType::F32, false, 0.0, 1},
                                   {"bf16 AdamW clip", DType::BF16, true, 1.0, 1},
                                   {"fp16 SGD scaler 2 micro-batches", DType::F16, false, 0.0, 2},
                                   {"fp16 AdamW scaler clip", DType::F16, true, 1.0, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Net net;
    const auto opt = make_optimizer(c, net.seq);
    amp::GradScaler::Options so;
    so.enabled = c.dtype == DType::F16;
    amp::GradScaler scaler(so);
    training::TrainStep step(*opt, scaler, {Device::Kind::CPU, c.dtype, c.clip, c.micro_batches});
    const Tensor labels = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    auto run = [&](double poison) {
      Tensor x = randn({8, 3, 8, 8}, net.gen);
      if (poison != 0.0) x = where(gt(x, 2.5), full({}, poison), x);  // a few inf/NaN pixels
      return step.run([&](int i) {
        const int64_t n = 8 / c.micro_batches;
        return cross_entropy(net.seq(x.slice(i * n, (i + 1) * n)), labels.slice(i * n, (i + 1) * n));
      });
    };
    const int64_t before = host_reads();
    training::TrainStep::Result clean[3];
    {
      const NoReadsAllowed no_reads;
      for (auto& r : clean) r = run(0.0);
    }
    EXPECT_EQ(host_reads(), before) << "host reads in three clean steps";
    for (const auto& r : clean) {
      EXPECT_TRUE(r.stepped());
      EXPECT_TRUE(std::isfinite(r.loss_value()));
    }

    const auto weights = net.weights();
    const StateDict state = opt->state_dict();
    training::TrainStep::Result poisoned;
    {
      const NoReadsAllowed no_reads;
      poisoned = run(INFINITY);
    }
    EXPECT_FALSE(poisoned.stepped());
    EXPECT_TRUE(poisoned.had_non_finite_loss());
    EXPECT_EQ(net.weights(), weights) << "a skipped step changed the weights";
    for (const auto& [key, value] : opt->state_dict()) {
      EXPECT_EQ(value.to(DType::F64).to_vector<double>(), state.at(key).to(DType::F64).to_vector<double>()) << key;
    }
    if (scaler.is_enabled()) {
      EXPECT_EQ(scaler.steps_skipped(), 1);
    }
    EXPECT_TRUE(run(0.0).stepped());
  }
}

// AdamW's bias correction counts the steps taken: a step skipped on the device is not one, so the
// run with a skip in the middle ends on the same weights as the run without that iteration.
TEST(TrainStep, AdamWSkippedOnTheDeviceDoesNotCountTheStep) {
  auto train = [](bool with_bad_iteration) {
    Tensor w = tensor({0.5f, -1.5f, 2.0f}, {3}).requires_grad_();
    optim::AdamW opt({w}, 0.1);
    amp::GradScaler scaler;
    training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, 0.0, 1});
    const std::vector<float> xs = with_bad_iteration ? std::vector<float>{1.0f, 2.0f, INFINITY, 3.0f}
                                                     : std::vector<float>{1.0f, 2.0f, 3.0f};
    for (float x : xs) step.run([&](int) { return sum(w * tensor({x, 1.0f, -x}, {3})); });
    return std::make_pair(w.to_vector<float>(), opt.state_dict().at("0.0.step").item<int64_t>());
  };
  const auto [plain, plain_steps] = train(false);
  const auto [skipped, skipped_steps] = train(true);
  EXPECT_EQ(plain_steps, 3);
  EXPECT_EQ(skipped_steps, 3);
  EXPECT_EQ(skipped, plain);
}

}  // namespace
}  // namespace demi

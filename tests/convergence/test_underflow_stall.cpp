// The stall from our story, reproduced on purpose on real data: SmallCNN on CIFAR-10 with its loss
// multiplied by k = 2^-19 (as a loss averaged over a huge count would be) and the learning rate
// and weight decay compensated (lr / k, wd * k), so in exact arithmetic it is the ordinary problem.
// In fp16 autocast without loss scaling the logits' gradients (~k * 1e-3 = 2e-9) are below half
// the smallest fp16 subnormal (3e-8) and round to exactly zero, so every gradient is zero and the
// loss does not move. The same run with the dynamic GradScaler (S = 65536 lifts them to ~1e-4)
// trains. Fails if the scaler stops scaling, or if half gradients stop underflowing as fp16 must.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <numeric>

#include "datasets/cifar10.h"
#include "datasets/data_loader.h"
#include "framework/demi/demi.h"
#include "models/small_cnn.h"
#include "support/real_data.h"

namespace demi {
namespace {

constexpr double kLossFactor = 1.0 / (1 << 19);  // a power of two: exact in fp32

struct StallRun {
  double first_loss = 0.0;            // mean (unscaled) loss of the first epoch
  double last_loss = 0.0;             // and of the second: the same images, so only learning lowers it
  double first_layer_zero = 0.0;      // mean fraction of exactly-zero conv1 weight-gradient elements
  int64_t skipped = 0;
};

StallRun train(const data::Dataset& train_set, bool use_scaler) {
  set_num_threads(2);
  Generator gen(0);
  manual_seed(0);
  models::SmallCNN net(gen);
  optim::SGD::Options o;
  o.lr = 0.02 / kLossFactor;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4 * kLossFactor;
  optim::SGD opt(net.parameters(), o);
  amp::GradScaler::Options so;
  so.enabled = use_scaler;
  amp::GradScaler scaler(so);
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, 0.0, 1});
  const Tensor first_weight = net.parameters().front();  // conv1's weight: the deepest gradient
  std::vector<double> zero_fractions;
  step.set_gradient_probe([&] {
    const std::vector<float> g = first_weight.grad().to_vector<float>();
    const auto zeros = std::count(g.begin(), g.end(), 0.0f);
    zero_fractions.push_back(static_cast<double>(zeros) / static_cast<double>(g.size()));
  });

  data::DataLoader::Options lo;
  lo.batch_size = 128;
  lo.drop_last = true;
  data::DataLoader loader(train_set, lo);
  std::vector<double> losses;
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.start_epoch(epoch);
    data::Batch batch;
    while (loader.next(batch)) {
      const auto r = step.run([&](int) { return cross_entropy(net(batch.images), batch.labels) * kLossFactor; });
      losses.push_back(r.loss_value() / kLossFactor);
    }
  }
  StallRun out;
  const auto half = static_cast<std::ptrdiff_t>(losses.size() / 2);
  out.first_loss = std::accumulate(losses.begin(), losses.begin() + half, 0.0) / static_cast<double>(half);
  out.last_loss = std::accumulate(losses.begin() + half, losses.end(), 0.0) / static_cast<double>(half);
  out.first_layer_zero =
      std::accumulate(zero_fractions.begin(), zero_fractions.end(), 0.0) / static_cast<double>(zero_fractions.size());
  out.skipped = scaler.steps_skipped();
  std::cout << (use_scaler ? "with" : "without") << " the scaler: loss " << out.first_loss << " -> " << out.last_loss
            << " over " << losses.size() << " steps; conv1 gradient elements exactly zero: "
            << 100.0 * out.first_layer_zero << "%; skipped steps " << out.skipped << "\n";
  return out;
}

TEST(UnderflowStall, Fp16WithoutLossScalingStallsAndWithItTrains) {
  DEMI_REQUIRE_REAL_DATA();
  const data::Dataset train_set =
      data::balanced_subset(data::load_cifar10(test::real_data_dir(), data::Split::Train), 5120, 0);

  const StallRun without = train(train_set, false);
  EXPECT_GT(without.first_layer_zero, 0.99) << "fp16 gradients of ~1e-9 must underflow to zero";
  EXPECT_GT(without.last_loss, without.first_loss - 0.02) << "with zero gradients the loss cannot fall";
  EXPECT_EQ(without.skipped, 0);

  const StallRun with = train(train_set, true);
  EXPECT_LT(with.first_layer_zero, 0.10) << "loss scaling must lift the gradients out of the underflow";
  EXPECT_LT(with.last_loss, with.first_loss - 0.2) << "with the scaler the same configuration trains";
}

}  // namespace
}  // namespace demi

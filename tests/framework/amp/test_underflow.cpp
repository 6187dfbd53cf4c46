// The stall from our story, reproduced on purpose: with the loss scaled down, fp16 gradients of
// the first layer underflow to exactly zero without loss scaling, and survive with it.
#include <gtest/gtest.h>

#include <iostream>

#include "framework/demi/demi.h"

namespace demi {
namespace {

double zero_fraction_of_first_layer_grad(bool use_scaler) {
  Generator gen(9);
  nn::Sequential net;
  net.emplace<nn::Linear>(nn::Linear::Options{32, 64}, gen)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(nn::Linear::Options{64, 64}, gen)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(nn::Linear::Options{64, 10}, gen);
  const Tensor x = randn({64, 32}, gen);
  std::vector<int64_t> labels;
  for (int i = 0; i < 64; ++i) labels.push_back(i % 10);
  optim::SGD opt(net.parameters(), {});
  amp::GradScaler::Options so;
  so.enabled = use_scaler;
  amp::GradScaler scaler(so);
  Tensor loss;
  {
    amp::AutocastGuard guard(Device::Kind::CPU, DType::F16);
    loss = cross_entropy(net(x), tensor(labels, {64})) * 1e-6;  // a loss scaled down 10^6
  }
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  const std::vector<float> g = net.parameters()[0].grad().to_vector<float>();
  size_t zeros = 0;
  for (float v : g) zeros += v == 0.0f;
  return static_cast<double>(zeros) / static_cast<double>(g.size());
}

TEST(Underflow, Fp16GradientsVanishWithoutTheScalerAndSurviveWithIt) {
  const double without = zero_fraction_of_first_layer_grad(false);
  const double with = zero_fraction_of_first_layer_grad(true);
  std::cout << "first-layer gradient elements exactly zero: without scaler " << without << ", with " << with << "\n";
  EXPECT_GT(without, 0.9);
  EXPECT_LT(with, 0.1);
}

}  // namespace
}  // namespace demi

// Checkpointing modules: nn::checkpoint_sequential and Sequential::checkpoint_blocks give the plain
// gradients bit for bit; batch norm inside a checkpoint updates its running statistics and
// num_batches_tracked once, not again in backward's rerun; bad segment counts and block starts are
// refused with the rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using test::error_of;
using testing::HasSubstr;

// conv, batch norm, ReLU, conv, batch norm, GELU, dropout: the BatchNorm2d + activation pairs run fused.
std::shared_ptr<nn::Sequential> conv_net(uint64_t seed) {
  Generator gen(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(8)
      .emplace<nn::ReLU>()
      .emplace<nn::Conv2d>(nn::Conv2d::Options{8, 8, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(8)
      .emplace<nn::GELU>()
      .emplace<nn::Dropout>(0.2);
  return net;
}

struct Outcome {
  std::vector<std::vector<float>> grads;  // of the parameters
  std::vector<std::vector<double>> state;  // state_dict's values
  GeneratorState rng;
};

// Two training steps' forward and backward (no optimizer), through `forward`.
template <typename Forward>
Outcome train_two_steps(nn::Sequential& net, Forward forward) {
  manual_seed(4);
  Generator gen(8);
  for (int step = 0; step < 2; ++step) {
    const Tensor x = randn({4, 3, 6, 6}, gen).requires_grad_();
    forward(x).pow(2.0).mean().backward();
  }
  Outcome out;
  for (const Tensor& p : net.parameters()) out.grads.push_back(p.grad().to_vector<float>());
  for (const auto& [name, t] : net.state_dict()) out.state.push_back(t.template to_vector<double>());
  out.rng = default_generator().state();
  return out;
}

void expect_same(const Outcome& plain, const Outcome& checkpointed) {
  EXPECT_EQ(plain.grads, checkpointed.grads);
  EXPECT_EQ(plain.state, checkpointed.state);  // running statistics and num_batches_tracked included
  EXPECT_EQ(plain.rng, checkpointed.rng);
}

TEST(CheckpointBlocks, SameGradientsAndRunningStatisticsUpdatedOnce) {
  auto plain_net = conv_net(1);
  const Outcome plain = train_two_steps(*plain_net, [&](const Tensor& x) { return (*plain_net)(x); });
  auto net = conv_net(1);
  net->checkpoint_blocks({0, 3});
  EXPECT_EQ(net->checkpointed_blocks(), (std::vector<size_t>{0, 3}));
  const Outcome checkpointed = train_two_steps(*net, [&](const Tensor& x) { return (*net)(x); });
  expect_same(plain, checkpointed);
  EXPECT_EQ(static_cast<nn::BatchNorm2d&>((*net)[1]).num_batches_tracked.item(), 2.0);
}

TEST(CheckpointBlocks, BatchNormInsideACheckpointedFunctionUnderBf16Autocast) {
  auto plain_net = conv_net(2);
  auto run = [](nn::Sequential& net, bool checkpointed) {
    return train_two_steps(net, [&](const Tensor& x) {
      amp::AutocastGuard autocast(Device::Kind::CPU, DType::BF16);
      return (checkpointed ? checkpoint([&](const Tensor& in) { return net(in); }, x) : net(x)).to(DType::F32);
    });
  };
  const Outcome plain = run(*plain_net, false);
  auto net = conv_net(2);
  expect_same(plain, run(*net, true));
}

TEST(CheckpointSequential, SplitsIntoSegmentsAndGivesThePlainGradients) {
  auto plain_net = conv_net(3);
  const Outcome plain = train_two_steps(*plain_net, [&](const Tensor& x) { return (*plain_net)(x); });
  for (int64_t segments : {1, 2, 3, 7}) {
    SCOPED_TRACE(segments);
    auto net = conv_net(3);
    expect_same(plain, train_two_steps(*net, [&](const Tensor& x) { return nn::checkpoint_sequential(*net, segments, x); }));
  }
}

TEST(CheckpointSequential, CheckpointsAllButTheLastSegment) {
  nn::Sequential net;
  for (int i = 0; i < 4; ++i) net.emplace<nn::Linear>(16, 16).emplace<nn::GELU>();
  const int64_t block = 8 * 16 * 4;
  const Tensor x = randn({8, 16});
  const int64_t before = autograd::saved_tensor_stats().current_bytes;
  {
    const Tensor plain = net(x);
    EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - before, 8 * block);  // two per Linear + GELU
  }
  const Tensor segmented = nn::checkpoint_sequential(net, 2, x);
  // The first segment keeps its input; the second, not checkpointed, its four tensors.
  EXPECT_EQ(autograd::saved_tensor_stats().current_bytes - before, 5 * block);
}

TEST(CheckpointSequential, RefusesSegmentCountsAndBlockStartsOutsideTheChildren) {
  auto net = conv_net(5);
  EXPECT_THAT(error_of([&] { nn::checkpoint_sequential(*net, 0, randn({2, 3, 4, 4})); }),
              HasSubstr("checkpoint_sequential: segments must be between 1 and the 7 children of the Sequential, got 0"));
  EXPECT_THAT(error_of([&] { nn::checkpoint_sequential(*net, 8, randn({2, 3, 4, 4})); }), HasSubstr("got 8"));
  EXPECT_THAT(error_of([&] { net->checkpoint_blocks({3, 3}); }),
              HasSubstr("block starts must be increasing child indices below 7; got 3 after 3"));
  EXPECT_THAT(error_of([&] { net->checkpoint_blocks({7}); }), HasSubstr("below 7; got 7"));
  net->checkpoint_blocks({});
  EXPECT_TRUE(net->checkpointed_blocks().empty());
}

}  // namespace
}  // namespace demi

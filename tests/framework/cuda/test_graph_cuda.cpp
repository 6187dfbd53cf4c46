// CUDA graphs on cuda:0: a recording replays on new values of its static inputs; what cannot be
// recorded throws a named error and leaves the device usable; random draws are refused. A
// training step captured by TrainStep (fp16 + GradScaler + accumulation + clipping + AdamW under a
// schedule, NCHW and channels_last, an inf batch and a partial batch among them) leaves weights,
// scale and skip count bit-identical to the same steps run eagerly, replays make no host read, a
// momentum that a schedule moves makes the step be captured again, and a bad label in a replayed
// step is still reported. Skips (one line) without a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using backend::cuda_test::kNoDevice;
using test::error_of;
using testing::HasSubstr;

TEST(CUDAGraphCuda, ReplaysOnNewValuesOfItsInputs) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  const Tensor x = zeros({1000}, DType::F32, cuda);
  cuda::CUDAGraph graph;
  graph.capture_begin(cuda);
  const Tensor y = x * 2.0 + 1.0;
  graph.capture_end();
  for (double v : {1.0, -3.5}) {
    x.fill_(v);
    graph.replay();
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(1000, static_cast<float>(2 * v + 1)));
  }
}

TEST(CUDAGraphCuda, WhatCannotBeRecordedThrowsAndTheDeviceStaysUsable) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  const Tensor x = ones({16}, DType::F32, cuda);
  cuda::CUDAGraph graph;
  graph.capture_begin(cuda);
  EXPECT_THAT(error_of([&] { (x * 3.0).sum().item<float>(); }),
              HasSubstr("a copy from the device to the host cannot run while a CUDA graph is being captured"));
  graph.reset();
  EXPECT_EQ((x * 3.0).sum().item<float>(), 48.0f);  // eager work runs again

  graph.capture_begin(cuda);
  const Tensor dropped = dropout(x, 0.5, true);
  EXPECT_THAT(error_of([&] { graph.capture_end(); }), HasSubstr("drew random numbers"));
  EXPECT_FALSE(graph.has_graph());
  EXPECT_EQ((x * 2.0).sum().item<float>(), 32.0f);
}

struct Outcome {
  std::vector<std::vector<float>> weights;
  std::vector<uint32_t> losses;  // bits: the inf batch's loss is NaN
  double scale = 0.0;
  int64_t skipped = 0, replays = 0, replay_reads = -1;
};

// 54 steps on batches of 16 (one holding an inf, one partial of 8): eager, or captured after 3.
Outcome train(bool graphed, MemoryFormat format) {
  const Device cuda = Device::cuda(0);
  Generator gen(21);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 16, 3, 1, 1}, gen)
      .emplace<nn::BatchNorm2d>(16)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(nn::Linear::Options{16 * 4 * 4, 10}, gen);
  net.to(cuda);
  net.to(format);
  optim::AdamW::Options o;
  o.lr = 3e-3;
  optim::AdamW opt(net.parameters(), o);
  optim::CosineWithWarmup schedule(opt, 5, 60);
  amp::GradScaler scaler;
  training::TrainStep::Options so{Device::Kind::CUDA, DType::F16, 1.0, 2};
  so.cuda_graph = graphed;
  training::TrainStep step(opt, scaler, so, &schedule);
  Outcome run;
  std::vector<training::TrainStep::Result> results;
  for (int k = 0; k < 54; ++k) {
    const int64_t n = k == 40 ? 8 : 16;
    Tensor x = randn({n, 3, 8, 8}, gen);
    if (k == 25) x = x * std::numeric_limits<float>::infinity();  // every gradient overflows: a skip
    const Tensor images = x.to(cuda).contiguous(format);
    std::vector<int64_t> classes(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) classes[static_cast<size_t>(i)] = (7 * k + 3 * i) % 10;
    const Tensor labels = tensor(classes, {n}).to(cuda);
    const int64_t reads = host_reads();
    results.push_back(step.run({images, labels}, [&](int i, const std::vector<Tensor>& b) {
      const int64_t m = b[0].size(0) / 2;
      return cross_entropy(net(b[0].slice(i * m, (i + 1) * m)), b[1].slice(i * m, (i + 1) * m));
    }));
    if (k == 30) run.replay_reads = host_reads() - reads;
  }
  for (const auto& r : results) {
    const float loss = r.loss.item<float>();
    uint32_t bits = 0;
    std::memcpy(&bits, &loss, sizeof(bits));
    run.losses.push_back(bits);
  }
  for (const Tensor& p : net.parameters()) run.weights.push_back(p.to(DType::F32).to_vector<float>());
  run.scale = scaler.get_scale();
  run.skipped = scaler.steps_skipped();
  run.replays = step.replays();
  return run;
}

TEST(TrainStepGraphCuda, ReplayedStepsAreBitIdenticalToEagerOnes) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    SCOPED_TRACE(format == MemoryFormat::ChannelsLast ? "channels_last" : "contiguous");
    const Outcome eager = train(false, format), graphed = train(true, format);
    EXPECT_EQ(eager.replays, 0);
    EXPECT_EQ(graphed.replays, 54 - 3 - 1);  // all but the warm-up steps and the partial batch
    EXPECT_EQ(graphed.replay_reads, 0) << "host reads in a replayed step";
    EXPECT_GE(graphed.skipped, 1);  // the inf batch at least
    EXPECT_EQ(graphed.skipped, eager.skipped);
    EXPECT_EQ(graphed.scale, eager.scale);
    EXPECT_EQ(graphed.losses, eager.losses);
    ASSERT_EQ(graphed.weights.size(), eager.weights.size());
    for (size_t k = 0; k < eager.weights.size(); ++k) {
      EXPECT_EQ(graphed.weights[k], eager.weights[k]) << "parameter " << k;
    }
  }
}

// OneCycle cycles SGD's momentum each step, a value the capture froze: every such step is captured
// again, so the weights still match eager steps bit for bit (and a warning says it is slow).
TEST(TrainStepGraphCuda, AChangedMomentumIsCapturedAgain) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  auto train_linear = [&](bool graphed, int64_t* captures) {
    Generator gen(8);
    nn::Linear net(nn::Linear::Options{8, 10}, gen);
    net.to(cuda);
    optim::SGD::Options o;
    o.lr = 0.1;
    o.momentum = 0.9;
    optim::SGD sgd(net.parameters(), o);
    optim::OneCycle schedule(sgd, 12);  // momentum cycled between 0.85 and 0.95
    amp::GradScaler scaler;
    training::TrainStep::Options so{Device::Kind::CUDA, DType::F16};
    so.cuda_graph = graphed;
    training::TrainStep step(sgd, scaler, so, &schedule);
    const Tensor labels = tensor(std::vector<int64_t>{0, 1, 2, 3}, {4}).to(cuda);
    for (int k = 0; k < 10; ++k) {
      const Tensor x = randn({4, 8}, gen).to(cuda);
      step.run({x, labels}, [&](int, const std::vector<Tensor>& b) { return cross_entropy(net(b[0]), b[1]); });
    }
    *captures = step.captures();
    return net.weight.to_vector<float>();
  };
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  int64_t eager_captures = 0, graph_captures = 0;
  const std::vector<float> eager = train_linear(false, &eager_captures), graphed = train_linear(true, &graph_captures);
  set_warning_handler(previous);
  EXPECT_EQ(graphed, eager);
  EXPECT_EQ(eager_captures, 0);
  EXPECT_EQ(graph_captures, 10 - 3);  // each step after the warm-up, as the momentum moves every step
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("captured again each time"));
}

TEST(TrainStepGraphCuda, ABadLabelInAReplayedStepIsReported) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  Generator gen(4);
  nn::Linear net(nn::Linear::Options{8, 10}, gen);
  net.to(cuda);
  optim::SGD sgd(net.parameters(), 0.1);
  amp::GradScaler scaler;
  training::TrainStep::Options so{Device::Kind::CUDA, DType::F16};
  so.cuda_graph = true;
  training::TrainStep step(sgd, scaler, so);
  const Tensor x = randn({4, 8}, gen).to(cuda);
  auto loss = [&](int, const std::vector<Tensor>& b) { return cross_entropy(net(b[0]), b[1]); };
  const Tensor good = tensor(std::vector<int64_t>{0, 1, 2, 3}, {4}).to(cuda);
  for (int k = 0; k < 5; ++k) step.run({x, good}, loss);
  ASSERT_TRUE(step.captured());
  const Tensor bad = tensor(std::vector<int64_t>{0, 1, 12, 3}, {4}).to(cuda);
  const training::TrainStep::Result r = step.run({x, bad}, loss);
  EXPECT_THAT(error_of([&] { r.loss_value(); }),
              HasSubstr("cross_entropy: target[2] = 12 is out of range for 10 classes"));
  EXPECT_TRUE(std::isfinite(step.run({x, good}, loss).loss_value()));  // read and cleared
}

}  // namespace
}  // namespace demi

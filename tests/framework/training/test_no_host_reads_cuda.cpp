// On cuda:0 a training step makes no host read (demi::host_reads()): the GradScaler's skip and the
// clipping are decided on the device, and the kernels' own checks (max_pool2d's indices,
// cross_entropy's labels) are read at the next synchronisation instead of after each call; a bad
// label is still an error, thrown there with the CPU's message. Skips (one line) without a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "framework/demi/demi.h"
#include "support/error_of.h"

namespace demi {
namespace {

using backend::cuda_test::kNoDevice;

TEST(TrainStepCuda, AStepMakesNoHostReadAndABadLabelComesAtTheNextRead) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  Generator gen(5);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 8, 3, 1, 1}, gen)
      .emplace<nn::BatchNorm2d>(8)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(nn::Linear::Options{8 * 4 * 4, 10}, gen);
  net.to(cuda);
  optim::SGD::Options o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD opt(net.parameters(), o);
  amp::GradScaler scaler;
  training::TrainStep step(opt, scaler, {Device::Kind::CUDA, DType::F16, 1.0, 2});
  const Tensor x = randn({8, 3, 8, 8}, gen).to(cuda);
  auto run = [&](const Tensor& labels) {
    return step.run([&](int i) { return cross_entropy(net(x.slice(4 * i, 4 * i + 4)), labels.slice(4 * i, 4 * i + 4)); });
  };
  const Tensor labels = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8}).to(cuda);
  run(labels);  // the first step: cuDNN's plans, the allocator's blocks
  const int64_t before = host_reads();
  training::TrainStep::Result r[5];
  for (auto& result : r) result = run(labels);
  EXPECT_EQ(host_reads(), before) << "host reads in five steps on cuda:0";
  EXPECT_TRUE(std::isfinite(r[4].loss_value()));

  const Tensor bad = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 12, 6, 7}, {8}).to(cuda);
  EXPECT_NO_THROW(run(bad));  // the step does not wait for the check
  EXPECT_THAT(test::error_of([&] { r[0].loss_value(); }),
              ::testing::HasSubstr("cross_entropy: target[1] = 12 is out of range for 10 classes"));
  EXPECT_TRUE(std::isfinite(run(labels).loss_value()));  // checks reset: the next step reads clean
}

}  // namespace
}  // namespace demi

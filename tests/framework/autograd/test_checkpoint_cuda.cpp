// demi::checkpoint on cuda:0: dropout draws from the CUDA device's default generator, which the
// rerun sets back to the first run's state and then restores, so the gradients under fp16
// autocast with a GradScaler and the generator's final state are the plain run's, bit for bit.
// Skips (one line) without a CUDA device.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "framework/demi/demi.h"

namespace demi {
namespace {

using backend::cuda_test::kNoDevice;

TEST(CheckpointCuda, DropoutUnderFp16AutocastGivesThePlainGradients) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Device cuda = Device::cuda(0);
  Generator gen(1);
  std::vector<Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back((randn({32, 32}, gen) * 0.2).to(cuda).requires_grad_());
  const Tensor input = randn({16, 32}, gen).to(cuda);
  auto block = [&](size_t i, const Tensor& x) { return dropout(gelu(linear(x, weights[i])), 0.25, true); };

  std::vector<std::vector<float>> grads[2];
  GeneratorState after[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    for (const Tensor& w : weights) w.set_grad(Tensor());
    manual_seed(5);
    amp::GradScaler scaler;
    Tensor loss;
    {
      amp::AutocastGuard autocast(Device::Kind::CUDA, DType::F16);
      Tensor y = input;
      for (size_t i = 0; i < weights.size(); ++i) {
        y = checkpointed ? checkpoint([&, i](const Tensor& x) { return block(i, x); }, y) : block(i, y);
      }
      loss = y.to(DType::F32).pow(2.0).mean();
    }
    scaler.scale(loss).backward();
    for (const Tensor& w : weights) grads[checkpointed].push_back(w.grad().to_vector<float>());
    after[checkpointed] = default_generator(cuda).state();
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(after[0], after[1]);
  EXPECT_EQ(after[1].offset, 3u * 16u * 32u);  // the three masks, drawn once each
}

}  // namespace
}  // namespace demi

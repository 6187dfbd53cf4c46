// Mixed precision on the reference SmallCNN: activations saved for backward in half precision
// take at most 0.55x the fp32 bytes (batch 128), and fp16/bf16 steps train.
#include <gtest/gtest.h>

#include <iostream>
#include <optional>

#include "models/small_cnn.h"

namespace demi {
namespace {

int64_t saved_bytes_of_forward(DType dtype) {
  Generator gen(0);
  models::SmallCNN net(gen);
  const Tensor x = randn({128, 3, 32, 32}, gen);
  const int64_t before = autograd::saved_tensor_stats().current_bytes;
  std::optional<amp::AutocastGuard> guard;
  if (dtype != DType::F32) guard.emplace(Device::Kind::CPU, dtype);
  const Tensor logits = net(x);
  return autograd::saved_tensor_stats().current_bytes - before;
}

TEST(SmallCnnAmp, SavedActivationBytesInHalfAreAtMost055OfFp32) {
  const int64_t fp32 = saved_bytes_of_forward(DType::F32);
  const int64_t fp16 = saved_bytes_of_forward(DType::F16);
  const int64_t bf16 = saved_bytes_of_forward(DType::BF16);
  RecordProperty("saved_fp32_bytes", std::to_string(fp32));
  RecordProperty("saved_fp16_bytes", std::to_string(fp16));
  std::cout << "SmallCNN batch 128 saved activations: fp32 " << fp32 / 1e6 << " MB, fp16 " << fp16 / 1e6
            << " MB, bf16 " << bf16 / 1e6 << " MB\n";
  EXPECT_GT(fp32, 100 * 1000 * 1000 / 4);  // sanity: tens of MB at batch 128
  EXPECT_LE(static_cast<double>(fp16), 0.55 * static_cast<double>(fp32));
  EXPECT_LE(static_cast<double>(bf16), 0.55 * static_cast<double>(fp32));
}

TEST(SmallCnnAmp, TrainStepLowersTheLossInEachPrecision) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Generator gen(5);
    models::SmallCNN net(gen);
    const Tensor x = randn({32, 3, 32, 32}, gen);
    std::vector<int64_t> labels;
    for (int i = 0; i < 32; ++i) labels.push_back(i % 10);
    const Tensor y = tensor(labels, {32});
    optim::SGD::Options o;
    o.lr = 0.05;
    o.momentum = 0.9;
    optim::SGD opt(net.parameters(), o);
    amp::GradScaler::Options so;
    so.enabled = dtype == DType::F16;  // bf16 has fp32's range: no scaler
    amp::GradScaler scaler(so);
    training::TrainStep step(opt, scaler, {Device::Kind::CPU, dtype, 5.0, 1});
    double first = 0, last = 0;
    for (int i = 0; i < 12; ++i) {
      const auto r = step.run([&](int) { return cross_entropy(net(x), y); });
      if (i == 0) first = r.loss_value();
      last = r.loss_value();
      EXPECT_GT(r.grad_norm_value(), 0.0);
    }
    EXPECT_LT(last, 0.7 * first) << dtype_name(dtype) << ": first " << first << ", last " << last;
  }
}

}  // namespace
}  // namespace demi

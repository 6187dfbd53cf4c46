// A complete mixed-precision training loop with demi: fp16 autocast, dynamic loss scaling,
// gradient clipping of the true gradients, all through training::TrainStep. Built as `amp_example`.
#include <demi/demi.h>

#include <iostream>

int main() {
  using namespace demi;
  Generator gen(0);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(nn::Conv2d::Options{3, 16, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{16})  // stays fp32 under autocast
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::GlobalAvgPool2d>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(nn::Linear::Options{16, 10}, gen);

  optim::SGD::Options sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  optim::SGD opt(net.parameters(), sgd);
  amp::GradScaler scaler;  // init_scale 65536, growth every 2000 clean steps
  training::TrainStep step(opt, scaler, {Device::Kind::CPU, DType::F16, /*clip_grad_norm=*/1.0, /*micro_batches=*/1});

  const Tensor images = randn({32, 3, 16, 16}, gen);
  std::vector<int64_t> labels(32);
  for (int i = 0; i < 32; ++i) labels[i] = i % 10;
  const Tensor targets = tensor(labels, {32});

  for (int i = 0; i < 10; ++i) {
    const auto r = step.run([&](int) { return cross_entropy(net(images), targets); });
    std::cout << "step " << i << ": loss " << r.loss_value() << (r.stepped() ? "" : " (skipped)") << ", grad norm "
              << r.grad_norm_value() << ", scale " << scaler.get_scale() << "\n";
  }
  return 0;
}

// The README's example, built and run by CI so that it cannot rot: one fp16 training step with
// autocast and a GradScaler, then the weights saved as safetensors.
#include <demi/demi.h>

#include <iostream>

int main() {
  demi::Generator gen(0);
  const demi::Tensor images = demi::randn({8, 3, 32, 32}, gen);
  const demi::Tensor labels = demi::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});

  demi::nn::Sequential net;
  net.emplace<demi::nn::Conv2d>(demi::nn::Conv2d::Options{3, 32, 3, 1, 1, false})  // padding 1, no bias
      .emplace<demi::nn::BatchNorm2d>(32)
      .emplace<demi::nn::ReLU>()
      .emplace<demi::nn::GlobalAvgPool2d>()
      .emplace<demi::nn::Flatten>()
      .emplace<demi::nn::Linear>(32, 10);
  demi::optim::SGD opt(net.parameters(), /*lr=*/0.1);
  demi::amp::GradScaler scaler;  // fp16 needs one; bf16 does not

  opt.zero_grad();
  demi::Tensor loss;
  {
    demi::amp::AutocastGuard autocast(demi::Device::Kind::CPU, demi::DType::F16);
    loss = demi::cross_entropy(net(images), labels);  // images [N,3,32,32], labels I64 [N]
  }
  scaler.scale(loss).backward();  // outside autocast, as in PyTorch
  scaler.step(opt);               // skipped if a gradient overflowed
  scaler.update();
  demi::save(net, "model.safetensors");  // safetensors.torch.load_file reads it; demi::load(net, ...)
  std::cout << "loss " << loss.item() << ", scale " << scaler.get_scale() << "\n";
  return 0;
}

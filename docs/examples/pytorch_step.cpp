// The training step of docs/pytorch.md, line for line beside its PyTorch twin: bf16 autocast,
// fp16-style loss scaling with the PyTorch clipping idiom (unscale_, then clip the parameters),
// accuracy with argmax and ==, and a checkpoint that Python loads with safetensors.torch.load_file.
// Built as `pytorch_step` so that the page cannot drift from the library.
#include <demi/demi.h>

#include <iostream>

int main() {
  using namespace demi;
  namespace F = nn::functional;
  Generator gen(0);

  nn::Sequential model;
  model.emplace<nn::Conv2d>(3, 16, 3, gen)
      .emplace<nn::BatchNorm2d>(16)
      .emplace<nn::ReLU>()
      .emplace<nn::GlobalAvgPool2d>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(16, 10, gen);
  optim::SGD opt(model.parameters(), 0.05);
  amp::GradScaler scaler;

  const Tensor images = randn({32, 3, 16, 16}, gen);
  std::vector<int64_t> classes(32);
  for (int i = 0; i < 32; ++i) classes[static_cast<size_t>(i)] = i % 10;
  const Tensor labels = tensor(classes, {32});

  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(Device::Kind::CPU, DType::BF16);
      loss = F::cross_entropy(model(images), labels);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    const Tensor norm = nn::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    std::cout << "step " << step << ": loss " << loss.item() << ", grad norm " << norm.item() << "\n";
  }

  NoGradGuard no_grad;
  model.eval();
  const double correct = (model(images).argmax(1) == labels).sum().item();
  std::cout << "accuracy " << correct / 32.0 << "\n";
  save(model, "pytorch_step_model.safetensors");
  return 0;
}

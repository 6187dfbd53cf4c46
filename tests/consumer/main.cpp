// Proves demi::demi is usable from outside, as a libtorch user writes it: short constructors,
// tensor methods, in-place ops, comparisons, nn::functional, and demi::save / demi::load of a
// module and its optimizer. Exits non-zero (naming the check) when anything is off.
#include <demi/demi.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "demi consumer: FAILED: " << what << "\n";
    ++failures;
  }
}

}  // namespace

int main() {
  namespace F = demi::nn::functional;
  demi::Generator gen(0);
  demi::nn::Linear fc(4, 2, gen);
  demi::optim::SGD opt(fc.parameters(), 0.1);
  const demi::Tensor x = demi::randn({8, 4}, gen);
  const demi::Tensor y = demi::tensor(std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0, 1}, {8});

  double first_loss = 0.0, loss_value = 0.0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    const demi::Tensor loss = F::cross_entropy(fc(x), y);
    loss.backward();
    opt.step();
    loss_value = loss.item();
    if (step == 0) first_loss = loss_value;
  }
  check(loss_value < first_loss, "SGD(params, 0.1) lowers the loss");

  // methods, comparisons and the accuracy idiom
  const demi::Tensor logits = fc(x);
  const double correct = (logits.argmax(1) == y).sum().item();
  check(correct >= 0 && correct <= 8, "(logits.argmax(1) == labels).sum().item() counts");
  check(logits.t().shape() == demi::Shape{2, 8}, "t() transposes");
  check(demi::cat({x, x}).shape() == demi::Shape{16, 4}, "cat joins along dim 0");
  check(x.clamp(-0.5, 0.5).to_vector<float>()[0] <= 0.5f, "clamp bounds");
  check(std::fabs(x[0].sum().item() - x.sum({1}).to_vector<double>()[0]) < 1e-5, "x[0] is row 0");

  // in place, under no_grad as in libtorch
  demi::Tensor w = demi::zeros({3});
  w += 1.0;
  w.mul_(4.0).add_(demi::ones({3}));
  check(w.to_vector<float>() == std::vector<float>{5, 5, 5}, "in-place arithmetic");

  // save / load round trip of the model and its optimizer
  const std::string model_path = "demi_consumer_model.safetensors";
  const std::string optimizer_path = "demi_consumer_optimizer.safetensors";
  demi::save(fc, model_path);
  demi::save(opt, optimizer_path);
  demi::nn::Linear restored(4, 2);
  demi::load(restored, model_path);
  check(restored.weight.to_vector<float>() == fc.weight.to_vector<float>(), "load(module) restores the weights");
  demi::optim::SGD restored_opt(restored.parameters(), 0.1);
  demi::load(restored_opt, optimizer_path);
  std::remove(model_path.c_str());
  std::remove(optimizer_path.c_str());

  // errors raised in installed headers name demi's file, not this machine's install prefix
  try {
    demi::zeros({2}).item();
    check(false, "item() of a 2-element tensor throws");
  } catch (const demi::Error& e) {
    const std::string message = e.what();
    check(message.find("(framework/tensor/tensor.h:") != std::string::npos, "error location: " + message);
    check(message.find("/include/") == std::string::npos, "no install prefix in: " + message);
  }

  if (failures) return 1;
  std::cout << "demi consumer: loss " << first_loss << " -> " << loss_value << ", " << correct << "/8 right\n";
  return 0;
}

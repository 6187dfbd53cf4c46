// Proves demi::demi is usable from outside: one SGD step on a linear model.
#include <demi/demi.h>

#include <iostream>

int main() {
  demi::Generator gen(0);
  demi::nn::Linear fc({4, 2}, gen);
  demi::optim::SGD::Options o;
  o.lr = 0.1;
  demi::optim::SGD opt(fc.parameters(), o);
  const demi::Tensor x = demi::randn({8, 4}, gen);
  const demi::Tensor y = demi::tensor(std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0, 1}, {8});
  const demi::Tensor loss = demi::cross_entropy(fc(x), y);
  loss.backward();
  opt.step();
  std::cout << "demi consumer: loss " << loss.item<float>() << "\n";
  return 0;
}

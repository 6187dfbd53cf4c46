// AirNet built from demi::nn. Each block is a Sequential whose children carry the PyTorch twin's
// attribute names (conv1, pool, bn1, conv2, bn2), so that state_dict names line up.
#include "models/airnet.h"

namespace demi::models {

AirNet::AirNet(Generator& gen, const AirNetOptions& options)
    : whiten_(register_module("whiten", std::make_shared<nn::Conv2d>(nn::Conv2d::Options{3, 24, 2, 1, 0, true}, gen))),
      blocks_(register_module("blocks", std::make_shared<nn::Sequential>())),
      fc_(register_module("fc", std::make_shared<nn::Linear>(nn::Linear::Options{256, 10, false}, gen))) {
  auto conv3 = [&](int64_t in, int64_t out) {
    auto conv = std::make_shared<nn::Conv2d>(nn::Conv2d::Options{in, out, 3, 1, 1, false}, gen);
    if (options.dirac_init) nn::init::dirac_(conv->weight.slice(0, in));
    return conv;
  };
  auto batch_norm = [&](int64_t width) {
    return std::make_shared<nn::BatchNorm2d>(
        nn::BatchNorm2d::Options{width, options.batch_norm_eps, options.batch_norm_momentum});
  };
  // A GELU follows each batch norm; the GELUs hold no state, so they add no state_dict names.
  int64_t in = 24;
  for (int64_t width : {64, 256, 256}) {
    auto block = std::make_shared<nn::Sequential>();
    block->add("conv1", conv3(in, width))
        .add("pool", std::make_shared<nn::MaxPool2d>(2))
        .add("bn1", batch_norm(width))
        .add("gelu1", std::make_shared<nn::GELU>())
        .add("conv2", conv3(width, width))
        .add("bn2", batch_norm(width))
        .add("gelu2", std::make_shared<nn::GELU>());
    blocks_->add(block);
    in = width;
  }
}

nn::Conv2d& AirNet::stem() { return *whiten_; }

Tensor AirNet::forward(const Tensor& x) {
  const Tensor features = global_max_pool2d((*blocks_)(gelu((*whiten_)(x)))).flatten(1);
  return (*fc_)(features) * (1.0 / 9.0);
}

}  // namespace demi::models

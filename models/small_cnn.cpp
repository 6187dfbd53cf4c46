// SmallCNN and AirNet built from demi::nn; the layer order follows the PyTorch reference so that
// state_dict names line up with its module structure.
#include "models/small_cnn.h"

namespace demi::models {
namespace {

void conv_bn_act(nn::Sequential& seq, int64_t in, int64_t out, Generator& gen) {
  seq.emplace<nn::Conv2d>(nn::Conv2d::Options{in, out, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{out})
      .emplace<nn::ReLU>();
}

}  // namespace

SmallCNN::SmallCNN(Generator& gen)
    : features_(register_module("features", std::make_shared<nn::Sequential>())),
      fc_(register_module("fc", std::make_shared<nn::Linear>(nn::Linear::Options{128, 10}, gen))) {
  nn::Sequential& f = *features_;
  conv_bn_act(f, 3, 32, gen);
  conv_bn_act(f, 32, 32, gen);
  f.emplace<nn::MaxPool2d>(2);
  conv_bn_act(f, 32, 64, gen);
  conv_bn_act(f, 64, 64, gen);
  f.emplace<nn::MaxPool2d>(2);
  conv_bn_act(f, 64, 128, gen);
  f.emplace<nn::MaxPool2d>(2).emplace<nn::GlobalAvgPool2d>().emplace<nn::Flatten>();
}

Tensor SmallCNN::forward(const Tensor& x) { return (*fc_)((*features_)(x)); }

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
  // Each block is the reference's AirBlock (conv1, pool, bn1, conv2, bn2, with F.gelu after each
  // batch norm): children named as its attributes, so that state_dict's names are its names.
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

std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen) {
  if (name == "SmallCNN") return std::make_shared<SmallCNN>(gen);
  if (name == "AirNet") return std::make_shared<AirNet>(gen);
  DEMI_THROW("unknown model '", name, "'; choose SmallCNN or AirNet");
}

}  // namespace demi::models

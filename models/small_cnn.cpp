// SmallCNN built from demi::nn. `features` holds the layers in the order of the PyTorch twin's
// nn.Sequential, so that state_dict names line up (features.0.weight is the first convolution).
#include "models/small_cnn.h"

namespace demi::models {
namespace {

void conv_bn_relu(nn::Sequential& seq, int64_t in, int64_t out, Generator& gen) {
  seq.emplace<nn::Conv2d>(nn::Conv2d::Options{in, out, 3, 1, 1, false}, gen)
      .emplace<nn::BatchNorm2d>(nn::BatchNorm2d::Options{out})
      .emplace<nn::ReLU>();
}

}  // namespace

SmallCNN::SmallCNN(Generator& gen)
    : features_(register_module("features", std::make_shared<nn::Sequential>())),
      fc_(register_module("fc", std::make_shared<nn::Linear>(nn::Linear::Options{128, 10}, gen))) {
  nn::Sequential& f = *features_;
  conv_bn_relu(f, 3, 32, gen);
  conv_bn_relu(f, 32, 32, gen);
  f.emplace<nn::MaxPool2d>(2);
  conv_bn_relu(f, 32, 64, gen);
  conv_bn_relu(f, 64, 64, gen);
  f.emplace<nn::MaxPool2d>(2);
  conv_bn_relu(f, 64, 128, gen);
  f.emplace<nn::MaxPool2d>(2).emplace<nn::GlobalAvgPool2d>().emplace<nn::Flatten>();
}

Tensor SmallCNN::forward(const Tensor& x) { return (*fc_)((*features_)(x)); }

}  // namespace demi::models

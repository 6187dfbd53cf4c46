// nn::Conv2d: weight [out, in, k, k] and optional bias [out], PyTorch's default initialisation.
#pragma once

#include "framework/nn/module.h"
#include "framework/tensor/generator.h"

namespace demi::nn {

class Conv2d : public Module {
 public:
  struct Options {
    int64_t in_channels = 0;
    int64_t out_channels = 0;
    int kernel_size = 3;
    int stride = 1;
    int padding = 0;
    bool bias = true;
  };
  explicit Conv2d(const Options& options, Generator& gen = default_generator());
  // libtorch's short form: Conv2d(in_channels, out_channels, kernel_size), stride 1, no padding,
  // with a bias.
  explicit Conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, Generator& gen = default_generator())
      : Conv2d(Options{in_channels, out_channels, kernel_size}, gen) {}
  Tensor forward(const Tensor& x) override;

  const Options& options() const { return options_; }
  Tensor& weight;
  Tensor& bias;

 private:
  Options options_;
};

}  // namespace demi::nn

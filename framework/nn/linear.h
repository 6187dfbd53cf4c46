// nn::Linear: weight [out, in] and optional bias [out], PyTorch's default initialisation.
#pragma once

#include "framework/nn/module.h"
#include "framework/tensor/generator.h"

namespace demi::nn {

class Linear : public Module {
 public:
  struct Options {
    int64_t in_features = 0;
    int64_t out_features = 0;
    bool bias = true;
  };
  explicit Linear(const Options& options, Generator& gen = default_generator());
  // libtorch's short form: Linear(in_features, out_features), with a bias.
  explicit Linear(int64_t in_features, int64_t out_features, Generator& gen = default_generator())
      : Linear(Options{in_features, out_features}, gen) {}
  Tensor forward(const Tensor& x) override;

  const Options& options() const { return options_; }
  Tensor& weight;
  Tensor& bias;

 private:
  Options options_;
};

}  // namespace demi::nn

// nn::LayerNorm: torch.nn.LayerNorm over the last dims of its input (normalized_shape), with a
// weight (ones) and a bias (zeros) of that shape when elementwise_affine, the bias optional as in
// torch 2.x; state_dict names `weight` and `bias`.
#pragma once

#include "framework/nn/module.h"

namespace demi::nn {

class LayerNorm : public Module {
 public:
  struct Options {
    Shape normalized_shape;
    double eps = 1e-5;
    bool elementwise_affine = true;
    bool bias = true;  // with elementwise_affine: false leaves the weight alone
  };
  explicit LayerNorm(const Options& options);
  // libtorch's short forms: LayerNorm({4, 5}) and, as torch.nn.LayerNorm(128), LayerNorm(128).
  explicit LayerNorm(Shape normalized_shape) : LayerNorm(Options{std::move(normalized_shape)}) {}
  explicit LayerNorm(int64_t normalized_size) : LayerNorm(Shape{normalized_size}) {}
  Tensor forward(const Tensor& x) override;
  // Parameters stay fp32 for half dtypes (float64 follows), as BatchNorm2d's: the kernel takes fp32
  // weight and bias beside a half input, and a gain near 1 keeps its small updates.
  Module& to(DType dtype) override;

  const Options& options() const { return options_; }
  Tensor& weight;
  Tensor& bias;

 private:
  Options options_;
};

}  // namespace demi::nn

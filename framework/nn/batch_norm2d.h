// nn::BatchNorm2d: affine weight/bias and running statistics, all fp32 whatever the model's dtype
// (statistics in half lose the small variances that matter).
#pragma once

#include "framework/nn/module.h"

namespace demi::nn {

class BatchNorm2d : public Module {
 public:
  struct Options {
    int64_t num_features = 0;
    double eps = 1e-5;
    double momentum = 0.1;
    bool affine = true;
    bool track_running_stats = true;
  };
  explicit BatchNorm2d(const Options& options);
  // libtorch's short form: BatchNorm2d(num_features).
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(Options{num_features}) {}
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) and gelu(forward(x)) as one op where the device fuses them
  // (demi::batch_norm_relu, demi::batch_norm_gelu): the same values, fewer passes over memory.
  // nn::Sequential calls them for a BatchNorm2d then a ReLU or a GELU.
  Tensor forward_relu(const Tensor& x);
  Tensor forward_gelu(const Tensor& x);
  // Parameters and buffers stay fp32 for half dtypes (float64 follows, for gradcheck).
  Module& to(DType dtype) override;

  const Options& options() const { return options_; }
  Tensor& weight;
  Tensor& bias;
  Tensor& running_mean;
  Tensor& running_var;
  Tensor& num_batches_tracked;

 private:
  enum class Activation { None, Relu, Gelu };
  Tensor run(const Tensor& x, Activation activation);

  Options options_;
};

}  // namespace demi::nn

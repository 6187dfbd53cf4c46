// nn::BatchNorm2d: batch statistics in training (updating the running ones), running statistics
// in eval, as torch.nn.BatchNorm2d.
#include "framework/nn/batch_norm2d.h"

#include "framework/autograd/checkpoint.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::nn {

BatchNorm2d::BatchNorm2d(const Options& o)
    : weight(register_parameter("weight", o.affine ? ones({o.num_features}) : Tensor())),
      bias(register_parameter("bias", o.affine ? zeros({o.num_features}) : Tensor())),
      running_mean(register_buffer("running_mean", o.track_running_stats ? zeros({o.num_features}) : Tensor())),
      running_var(register_buffer("running_var", o.track_running_stats ? ones({o.num_features}) : Tensor())),
      num_batches_tracked(register_buffer("num_batches_tracked",
                                          o.track_running_stats ? zeros({}, DType::I64) : Tensor())),
      options_(o) {
  DEMI_CHECK(o.num_features > 0, "nn::BatchNorm2d: num_features must be positive, got ", o.num_features);
}

Tensor BatchNorm2d::forward(const Tensor& x) { return run(x, Activation::None); }

Tensor BatchNorm2d::forward_relu(const Tensor& x) { return run(x, Activation::Relu); }

Tensor BatchNorm2d::forward_gelu(const Tensor& x) { return run(x, Activation::Gelu); }

Tensor BatchNorm2d::run(const Tensor& x, Activation activation) {
  DEMI_CHECK(x.dim() == 4, "BatchNorm2d: input must be [N, C, H, W], got ", x.shape());
  const bool batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined() && !autograd::is_recomputing()) {  // counted in the first run
    num_batches_tracked.add_(1.0);  // on the device: no read back to the host
  }
  BatchNormOptions o;
  o.training = batch_stats;
  o.momentum = options_.momentum;
  o.eps = options_.eps;
  switch (activation) {
    case Activation::Relu: return batch_norm_relu(x, running_mean, running_var, weight, bias, o);
    case Activation::Gelu: return batch_norm_gelu(x, running_mean, running_var, weight, bias, o);
    case Activation::None: break;
  }
  return batch_norm(x, running_mean, running_var, weight, bias, o);
}

Module& BatchNorm2d::to(DType dtype) {
  return Module::to(dtype == DType::F64 ? DType::F64 : DType::F32);
}

}  // namespace demi::nn

// nn::LayerNorm: its parameters, initialised as torch.nn.LayerNorm's, plus a call to demi::layer_norm.
#include "framework/nn/layer_norm.h"

#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::nn {
namespace {

const LayerNorm::Options& checked(const LayerNorm::Options& o) {
  DEMI_CHECK(!o.normalized_shape.empty(), "nn::LayerNorm: normalized_shape must have at least one dimension, got []");
  for (int64_t d : o.normalized_shape) {
    DEMI_CHECK(d >= 0, "nn::LayerNorm: normalized_shape ", o.normalized_shape, " has a negative dimension");
  }
  return o;
}

}  // namespace

LayerNorm::LayerNorm(const Options& o)
    : weight(register_parameter("weight", checked(o).elementwise_affine ? ones(o.normalized_shape) : Tensor())),
      bias(register_parameter("bias", o.elementwise_affine && o.bias ? zeros(o.normalized_shape) : Tensor())),
      options_(o) {}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, options_.normalized_shape, weight, bias, options_.eps);
}

Module& LayerNorm::to(DType dtype) { return Module::to(dtype == DType::F64 ? DType::F64 : DType::F32); }

}  // namespace demi::nn

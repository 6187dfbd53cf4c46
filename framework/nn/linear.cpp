// nn::Linear: parameters plus a call to demi::linear.
#include "framework/nn/linear.h"

#include "framework/nn/init.h"
#include "framework/ops/ops.h"

namespace demi::nn {

Linear::Linear(const Options& o, Generator& gen)
    : weight(register_parameter("weight", empty({o.out_features, o.in_features}))),
      bias(register_parameter("bias", o.bias ? empty({o.out_features}) : Tensor())),
      options_(o) {
  DEMI_CHECK(o.in_features > 0 && o.out_features > 0, "nn::Linear: in_features and out_features must be "
             "positive, got ", o.in_features, " and ", o.out_features);
  init::default_uniform_(weight, o.in_features, gen);
  if (bias.defined()) init::default_uniform_(bias, o.in_features, gen);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

}  // namespace demi::nn

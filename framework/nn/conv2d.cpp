// nn::Conv2d: parameters plus a call to demi::conv2d.
#include "framework/nn/conv2d.h"

#include "framework/nn/init.h"
#include "framework/ops/ops.h"

namespace demi::nn {

Conv2d::Conv2d(const Options& o, Generator& gen)
    : weight(register_parameter("weight", empty({o.out_channels, o.in_channels, o.kernel_size, o.kernel_size}))),
      bias(register_parameter("bias", o.bias ? empty({o.out_channels}) : Tensor())),
      options_(o) {
  DEMI_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel_size > 0, "nn::Conv2d: in_channels, "
             "out_channels and kernel_size must be positive, got ", o.in_channels, ", ", o.out_channels, ", ", o.kernel_size);
  const int64_t fan_in = o.in_channels * o.kernel_size * o.kernel_size;
  init::default_uniform_(weight, fan_in, gen);
  if (bias.defined()) init::default_uniform_(bias, fan_in, gen);
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options_.stride, options_.padding); }

}  // namespace demi::nn

// conv2d: convolution (groups 1) on the backend's conv kernels. Saves x and weight; backward_data
// gives grad_x, backward_weight gives grad_weight and grad_bias in one pass. NHWC where the input or
// the weight is channels_last (PyTorch's rule) and the device has NHWC kernels: the output is
// channels_last then; elsewhere the kernels read contiguous copies.
#include "framework/core/conv2d_shape.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Conv2dAttrs {
  int stride, padding;
  bool has_bias;
  bool nhwc = false;  // set by forward: the kernels ran channels_last
};

struct Conv2d {
  static constexpr const char* kName = "conv2d";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;
  static constexpr bool kKeepsMemoryFormat = true;

  static backend::Conv2dArgs args(const Conv2dAttrs& attrs) {
    backend::Conv2dArgs a;
    a.stride_h = a.stride_w = attrs.stride;
    a.pad_h = a.pad_w = attrs.padding;
    a.channels_last = attrs.nhwc;
    return a;
  }

  static Tensor forward(OpContext& ctx, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias,
                        Conv2dAttrs attrs) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(x_in.dtype() == weight_in.dtype(), "conv2d: input is ", x_in.dtype(), " but weight is ",
               weight_in.dtype(), "; convert one with .to(dtype) or run under autocast");
    // fp64 stays NCHW, as in PyTorch: cuDNN's NHWC convolutions are for fp32 and the half types.
    attrs.nhwc = x_in.dtype() != DType::F64 && runs_channels_last(x_in, weight_in);
    const Tensor x = in_kernel_format(x_in, attrs.nhwc), weight = in_kernel_format(weight_in, attrs.nhwc);
    DEMI_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "conv2d: bias is ", bias.dtype(), " but input is ",
               x.dtype(), "; convert it with .to(dtype) or run under autocast");
    ctx.save(ctx.needs_grad(1) || ctx.needs_grad(2) ? x : Tensor());
    ctx.save(ctx.needs_grad(0) ? weight : Tensor());
    const Conv2dOutputShape out = conv2d_output_shape(x.size(2), x.size(3), weight.size(2), weight.size(3), attrs.stride,
                                                      attrs.stride, attrs.padding, attrs.padding);
    Tensor y = empty({x.size(0), weight.size(0), out.h, out.w}, x.dtype(), x.device(),
                     kernel_format(attrs.nhwc));
    backend::Conv2dArgs a = args(attrs);
    a.input = kernel_ref(x, attrs.nhwc);
    a.weight = kernel_ref(weight, attrs.nhwc);
    a.output = kernel_ref(y, attrs.nhwc);
    if (bias.defined()) a.bias = bias.ref();
    kernels(x).conv2d_forward(a);
    ctx.set_attrs(std::make_pair(attrs, std::make_pair(x.shape(), weight.shape())));
    return y;
  }

  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [attrs, shapes] = ctx.attrs<std::pair<Conv2dAttrs, std::pair<Shape, Shape>>>();
    const MemoryFormat format = kernel_format(attrs.nhwc);
    // grad_y comes in the output's format (the engine's rule), which is the kernels' format.
    TensorList grads(3);
    if (ctx.needs_grad(0)) {
      grads[0] = empty(shapes.first, grad_y.dtype(), grad_y.device(), format);
      backend::Conv2dArgs a = args(attrs);
      a.input = kernel_ref(grads[0], attrs.nhwc);
      a.weight = kernel_ref(ctx.saved(1), attrs.nhwc);
      a.output = kernel_ref(grad_y, attrs.nhwc);
      kernels(grad_y).conv2d_backward_data(a);
    }
    if (ctx.needs_grad(1) || ctx.needs_grad(2)) {
      grads[1] = empty(shapes.second, grad_y.dtype(), grad_y.device(), format);
      backend::Conv2dArgs a = args(attrs);
      a.input = kernel_ref(ctx.saved(0), attrs.nhwc);
      a.weight = kernel_ref(grads[1], attrs.nhwc);
      a.output = kernel_ref(grad_y, attrs.nhwc);
      if (attrs.has_bias) {
        grads[2] = empty({shapes.second[0]}, grad_y.dtype(), grad_y.device());
        a.bias = grads[2].ref();
      }
      kernels(grad_y).conv2d_backward_weight(a);
      if (!ctx.needs_grad(1)) grads[1] = Tensor();
      if (!ctx.needs_grad(2)) grads[2] = Tensor();
    }
    return grads;
  }
};
DEMI_REGISTER_OP(Conv2d)

}  // namespace demi::ops

namespace demi {
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride, int padding) {
  ops::check_floating("conv2d", "input", x);
  ops::check_floating("conv2d", "weight", weight);
  ops::check_dim("conv2d", "input", x, 4, "[N, C, H, W]");
  ops::check_dim("conv2d", "weight", weight, 4, "[out_channels, in_channels, KH, KW]");
  ops::check_same_device("conv2d", x, weight);
  DEMI_CHECK(x.size(1) == weight.size(1), "conv2d: input ", x.shape(), " has ", x.size(1),
             " channels but weight ", weight.shape(), " expects ", weight.size(1));
  DEMI_CHECK(stride >= 1 && padding >= 0, "conv2d: stride must be >= 1 and padding >= 0, got stride ",
             stride, ", padding ", padding);
  DEMI_CHECK(x.size(2) + 2 * padding >= weight.size(2) && x.size(3) + 2 * padding >= weight.size(3),
             "conv2d: kernel ", weight.size(2), "x", weight.size(3), " is larger than the padded input ",
             x.size(2) + 2 * padding, "x", x.size(3) + 2 * padding);
  if (bias.defined()) {
    ops::check_floating("conv2d", "bias", bias);
    ops::check_same_device("conv2d", x, bias);
    DEMI_CHECK(bias.shape() == Shape{weight.size(0)}, "conv2d: bias must be [", weight.size(0), "], got ", bias.shape());
  }
  return ops::apply<ops::Conv2d>(x, weight, bias, ops::Conv2dAttrs{stride, padding, bias.defined()});
}
}  // namespace demi

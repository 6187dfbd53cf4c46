// conv2d: NCHW convolution (groups 1) on the backend's conv kernels. Saves x and weight;
// backward_data gives grad_x, backward_weight gives grad_weight and grad_bias in one pass.
#include "framework/core/conv2d_shape.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Conv2dAttrs {
  int stride, padding;
  bool has_bias;
};

struct Conv2d {
  static constexpr const char* kName = "conv2d";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;

  static backend::Conv2dArgs args(const Conv2dAttrs& attrs) {
    backend::Conv2dArgs a;
    a.stride_h = a.stride_w = attrs.stride;
    a.pad_h = a.pad_w = attrs.padding;
    return a;
  }

  static Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dAttrs& attrs) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(x.dtype() == weight.dtype(), "conv2d: input is ", x.dtype(), " but weight is ", weight.dtype(),
               "; convert one with .to(dtype) or run under autocast");
    DEMI_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "conv2d: bias is ", bias.dtype(), " but input is ",
               x.dtype(), "; convert it with .to(dtype) or run under autocast");
    ctx.save(ctx.needs_grad(1) || ctx.needs_grad(2) ? x : Tensor());
    ctx.save(ctx.needs_grad(0) ? weight : Tensor());
    const Conv2dOutputShape out = conv2d_output_shape(x.size(2), x.size(3), weight.size(2), weight.size(3), attrs.stride,
                                                      attrs.stride, attrs.padding, attrs.padding);
    Tensor y = empty({x.size(0), weight.size(0), out.h, out.w}, x.dtype(), x.device());
    backend::Conv2dArgs a = args(attrs);
    a.input = x.ref();
    a.weight = weight.ref();
    a.output = y.ref();
    if (bias.defined()) a.bias = bias.ref();
    kernels(x).conv2d_forward(a);
    ctx.set_attrs(std::make_pair(attrs, std::make_pair(x.shape(), weight.shape())));
    return y;
  }

  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [attrs, shapes] = ctx.attrs<std::pair<Conv2dAttrs, std::pair<Shape, Shape>>>();
    TensorList grads(3);
    if (ctx.needs_grad(0)) {
      grads[0] = empty(shapes.first, grad_y.dtype(), grad_y.device());
      backend::Conv2dArgs a = args(attrs);
      a.input = grads[0].ref();
      a.weight = ctx.saved(1).ref();
      a.output = grad_y.ref();
      kernels(grad_y).conv2d_backward_data(a);
    }
    if (ctx.needs_grad(1) || ctx.needs_grad(2)) {
      grads[1] = empty(shapes.second, grad_y.dtype(), grad_y.device());
      backend::Conv2dArgs a = args(attrs);
      a.input = ctx.saved(0).ref();
      a.weight = grads[1].ref();
      a.output = grad_y.ref();
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

// max_pool2d: saves only the argmax offsets (U8 for windows up to 256 elements), not the input;
// backward scatters grad_y to those positions. NHWC where the input is channels_last and the
// device has the kernels.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/pool2d_shape.h"

namespace demi::ops {

struct MaxPool2d {
  static constexpr const char* kName = "max_pool2d";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x_in, PoolGeometry g) {
    g.nhwc = runs_channels_last(x_in);
    const Tensor x = in_kernel_format(x_in, g.nhwc);
    backend::Pool2dArgs args = g.args(backend::PoolKind::Max);
    Tensor y = empty(g.output_shape(x.shape()), x.dtype(), x.device(), g.format());
    Tensor indices = empty(y.shape(), g.kernel_h * g.kernel_w <= 256 ? DType::U8 : DType::I64, x.device(), g.format());
    args.input = kernel_ref(x, g.nhwc);
    args.output = kernel_ref(y, g.nhwc);
    args.indices = kernel_ref(indices, g.nhwc);
    kernels(x).pool2d_forward(args);
    ctx.save(indices);
    ctx.set_attrs(std::make_pair(g, x.shape()));
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [g, shape] = ctx.attrs<std::pair<PoolGeometry, Shape>>();
    Tensor grad_x = empty(shape, grad_y.dtype(), grad_y.device(), g.format());
    backend::Pool2dArgs args = g.args(backend::PoolKind::Max);
    args.input = kernel_ref(grad_x, g.nhwc);
    args.output = kernel_ref(grad_y, g.nhwc);  // in the output's format, as every grad_y
    args.indices = kernel_ref(ctx.saved(0), g.nhwc);
    kernels(grad_y).pool2d_backward(args);
    return {grad_x};
  }
};
DEMI_REGISTER_OP(MaxPool2d)

}  // namespace demi::ops

namespace demi {
Tensor max_pool2d(const Tensor& x, int kernel_size, int stride, int padding) {
  const auto g = ops::PoolGeometry::make("max_pool2d", x, kernel_size, kernel_size, stride, padding);
  return ops::apply<ops::MaxPool2d>(x, g);
}
Tensor global_max_pool2d(const Tensor& x) {
  ops::check_dim("global_max_pool2d", "input", x, 4, "[N, C, H, W]");
  const auto g = ops::PoolGeometry::make("global_max_pool2d", x, static_cast<int>(x.size(2)),
                                         static_cast<int>(x.size(3)), 1, 0);
  return ops::apply<ops::MaxPool2d>(x, g);
}
}  // namespace demi

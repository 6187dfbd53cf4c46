// avg_pool2d: padding counts in the divisor (PyTorch's count_include_pad=True); saves nothing but
// the input's shape. NHWC where the input is channels_last and the device has the kernels.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/pool2d_shape.h"

namespace demi::ops {

struct AvgPool2d {
  static constexpr const char* kName = "avg_pool2d";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x_in, PoolGeometry g) {
    g.nhwc = runs_channels_last(x_in);
    const Tensor x = in_kernel_format(x_in, g.nhwc);
    backend::Pool2dArgs args = g.args(backend::PoolKind::Avg);
    Tensor y = empty(g.output_shape(x.shape()), x.dtype(), x.device(), g.format());
    args.input = kernel_ref(x, g.nhwc);
    args.output = kernel_ref(y, g.nhwc);
    kernels(x).pool2d_forward(args);
    ctx.set_attrs(std::make_pair(g, x.shape()));
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [g, shape] = ctx.attrs<std::pair<PoolGeometry, Shape>>();
    Tensor grad_x = empty(shape, grad_y.dtype(), grad_y.device(), g.format());
    backend::Pool2dArgs args = g.args(backend::PoolKind::Avg);
    args.input = kernel_ref(grad_x, g.nhwc);
    args.output = kernel_ref(grad_y, g.nhwc);
    kernels(grad_y).pool2d_backward(args);
    return {grad_x};
  }
};
DEMI_REGISTER_OP(AvgPool2d)

}  // namespace demi::ops

namespace demi {
Tensor avg_pool2d(const Tensor& x, int kernel_size, int stride, int padding) {
  const auto g = ops::PoolGeometry::make("avg_pool2d", x, kernel_size, kernel_size, stride, padding);
  return ops::apply<ops::AvgPool2d>(x, g);
}
// One window over the whole plane: avg_pool2d's op, so the result keeps the input's dtype under
// autocast (pooling is Unchanged), where mean's Fp32 rule would widen it.
Tensor global_avg_pool2d(const Tensor& x) {
  ops::check_dim("global_avg_pool2d", "input", x, 4, "[N, C, H, W]");
  const auto g = ops::PoolGeometry::make("global_avg_pool2d", x, static_cast<int>(x.size(2)),
                                         static_cast<int>(x.size(3)), 1, 0);
  return ops::apply<ops::AvgPool2d>(x, g);
}
}  // namespace demi

// div: y = a / b with broadcasting; grad_a = grad_y / b, grad_b = -grad_y * ((a / b) / b), in
// PyTorch's order: a / b^2 would make 0 / (1e-45)^2 a NaN where the gradient is 0.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Div {
  static constexpr const char* kName = "div";
  static constexpr amp::Category kCast = amp::Category::Promote;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    ctx.save(ctx.needs_grad(1) ? a : Tensor());
    ctx.save(b);
    return binary_kernel(kName, backend::BinaryKind::Div, a, b);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    const Tensor& b = ctx.saved(1);
    const Tensor grad_a = grad_y / b;
    return {ctx.needs_grad(0) ? sum_to(grad_a, shape_a) : Tensor(),
            ctx.needs_grad(1) ? sum_to(-(grad_y * (ctx.saved(0) / b / b)), shape_b) : Tensor()};
  }
};
DEMI_REGISTER_OP(Div)

}  // namespace demi::ops

namespace demi {
Tensor div(const Tensor& a, const Tensor& b) { return ops::apply<ops::Div>(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
}  // namespace demi

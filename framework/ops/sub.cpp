// sub: y = a - b with broadcasting; grad_a = grad_y, grad_b = -grad_y, each summed to its shape.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Sub {
  static constexpr const char* kName = "sub";
  static constexpr amp::Category kCast = amp::Category::Promote;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    return binary_kernel(kName, backend::BinaryKind::Sub, a, b);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    return {ctx.needs_grad(0) ? sum_to(grad_y, shape_a) : Tensor(),
            ctx.needs_grad(1) ? sum_to(-grad_y, shape_b) : Tensor()};
  }
};
DEMI_REGISTER_OP(Sub)

}  // namespace demi::ops

namespace demi {
Tensor sub(const Tensor& a, const Tensor& b) { return ops::apply<ops::Sub>(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
}  // namespace demi

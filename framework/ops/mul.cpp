// mul: y = a * b with broadcasting; grad_a = grad_y * b, grad_b = grad_y * a (summed to shape).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Mul {
  static constexpr const char* kName = "mul";
  static constexpr amp::Category kCast = amp::Category::Promote;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    ctx.save(ctx.needs_grad(1) ? a : Tensor());  // each gradient needs only the other operand
    ctx.save(ctx.needs_grad(0) ? b : Tensor());
    return binary_kernel(kName, backend::BinaryKind::Mul, a, b);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    return {ctx.needs_grad(0) ? sum_to(grad_y * ctx.saved(1), shape_a) : Tensor(),
            ctx.needs_grad(1) ? sum_to(grad_y * ctx.saved(0), shape_b) : Tensor()};
  }
};
DEMI_REGISTER_OP(Mul)

}  // namespace demi::ops

namespace demi {
Tensor mul(const Tensor& a, const Tensor& b) { return ops::apply<ops::Mul>(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
}  // namespace demi

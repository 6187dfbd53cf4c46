// add: y = a + b with broadcasting; each gradient is grad_y summed back to its input's shape.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Add {
  static constexpr const char* kName = "add";
  static constexpr amp::Category kCast = amp::Category::Promote;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    return binary_kernel(kName, backend::BinaryKind::Add, a, b);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    return {ctx.needs_grad(0) ? sum_to(grad_y, shape_a) : Tensor(),
            ctx.needs_grad(1) ? sum_to(grad_y, shape_b) : Tensor()};
  }
};
DEMI_REGISTER_OP(Add)

}  // namespace demi::ops

namespace demi {
Tensor add(const Tensor& a, const Tensor& b) { return ops::apply<ops::Add>(a, b); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
}  // namespace demi

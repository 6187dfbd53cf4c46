// relu: y = max(x, 0). Saves y, not x: the mask y > 0 is all backward needs, and y is kept alive
// by the next op anyway in most nets.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Relu {
  static constexpr const char* kName = "relu";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    Tensor y = unary_kernel(backend::UnaryKind::Relu, x);
    ctx.save(y);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {binary_kernel(kName, backend::BinaryKind::ReluBackward, grad_y, ctx.saved(0))};
  }
};
DEMI_REGISTER_OP(Relu)

}  // namespace demi::ops

namespace demi {
Tensor relu(const Tensor& x) { return ops::apply<ops::Relu>(x); }
}  // namespace demi

// abs: y = |x|, the sign bit cleared (|-0| = +0, NaN stays NaN). grad_x = grad_y * sign(x): 0 at
// x = 0 and at NaN, as PyTorch's (a product, as there: an inf gradient at x = 0 gives NaN).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Abs {
  static constexpr const char* kName = "abs";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    ctx.save(x);
    return unary_kernel(backend::UnaryKind::Abs, x);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const Tensor sign = unary_kernel(backend::UnaryKind::Sign, ctx.saved(0));
    return {binary_kernel(kName, backend::BinaryKind::Mul, grad_y, sign)};
  }
};
DEMI_REGISTER_OP(Abs)

}  // namespace demi::ops

namespace demi {
Tensor abs(const Tensor& x) { return ops::apply<ops::Abs>(x); }
}  // namespace demi

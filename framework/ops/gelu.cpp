// gelu: y = x * Phi(x) (erf form); grad_x = grad_y * (Phi(x) + x * phi(x)), one fused kernel.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    ctx.save(x);
    return unary_kernel(backend::UnaryKind::Gelu, x);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {binary_kernel(kName, backend::BinaryKind::GeluBackward, grad_y, ctx.saved(0))};
  }
};
DEMI_REGISTER_OP(Gelu)

}  // namespace demi::ops

namespace demi {
Tensor gelu(const Tensor& x) { return ops::apply<ops::Gelu>(x); }
}  // namespace demi

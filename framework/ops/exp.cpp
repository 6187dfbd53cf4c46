// exp: y = e^x; grad_x = grad_y * y (saves the output, which backward needs anyway).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Exp {
  static constexpr const char* kName = "exp";
  static constexpr amp::Category kCast = amp::Category::Fp32;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    Tensor y = unary_kernel(backend::UnaryKind::Exp, x);
    ctx.save(y);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y * ctx.saved(0)}; }
};
DEMI_REGISTER_OP(Exp)

}  // namespace demi::ops

namespace demi {
Tensor exp(const Tensor& x) { return ops::apply<ops::Exp>(x); }
}  // namespace demi

// sqrt: y = sqrt x; grad_x = grad_y / (2 y) (saves the output).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Sqrt {
  static constexpr const char* kName = "sqrt";
  static constexpr amp::Category kCast = amp::Category::Unchanged;  // not on PyTorch's fp32 list (rsqrt is)
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    Tensor y = unary_kernel(backend::UnaryKind::Sqrt, x);
    ctx.save(y);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y / (2.0 * ctx.saved(0))}; }
};
DEMI_REGISTER_OP(Sqrt)

}  // namespace demi::ops

namespace demi {
Tensor sqrt(const Tensor& x) { return ops::apply<ops::Sqrt>(x); }
}  // namespace demi

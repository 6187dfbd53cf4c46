// pow: y = x^p for a scalar exponent p; grad_x = grad_y * p * x^(p-1), and 0 for p = 0 (as
// PyTorch: 0 * x^-1 would be NaN at x = 0).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Pow {
  static constexpr const char* kName = "pow";
  static constexpr amp::Category kCast = amp::Category::Fp32;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x, double exponent) {
    check_floating(kName, "input", x);
    ctx.save(x);
    ctx.set_attrs(exponent);
    return unary_kernel(backend::UnaryKind::Pow, x, exponent);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const double p = ctx.attrs<double>();
    if (p == 0.0) return {zeros_like(grad_y)};
    return {grad_y * (pow(ctx.saved(0), p - 1.0) * p)};
  }
};
DEMI_REGISTER_OP(Pow)

}  // namespace demi::ops

namespace demi {
Tensor pow(const Tensor& x, double exponent) { return ops::apply<ops::Pow>(x, exponent); }
}  // namespace demi

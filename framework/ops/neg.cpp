// neg: y = -x; grad_x = -grad_y.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Neg {
  static constexpr const char* kName = "neg";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext&, const Tensor& x) {
    check_floating(kName, "input", x);
    return unary_kernel(backend::UnaryKind::Neg, x);
  }
  static TensorList backward(OpContext&, const Tensor& grad_y) { return {-grad_y}; }
};
DEMI_REGISTER_OP(Neg)

}  // namespace demi::ops

namespace demi {
Tensor neg(const Tensor& x) { return ops::apply<ops::Neg>(x); }
Tensor operator-(const Tensor& x) { return neg(x); }
}  // namespace demi

// log: y = ln x; grad_x = grad_y / x.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Log {
  static constexpr const char* kName = "log";
  static constexpr amp::Category kCast = amp::Category::Fp32;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    check_floating(kName, "input", x);
    ctx.save(x);
    return unary_kernel(backend::UnaryKind::Log, x);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y / ctx.saved(0)}; }
};
DEMI_REGISTER_OP(Log)

}  // namespace demi::ops

namespace demi {
Tensor log(const Tensor& x) { return ops::apply<ops::Log>(x); }
}  // namespace demi

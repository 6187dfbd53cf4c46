// clamp: y = min(max(x, min), max), NaN kept. grad_x = grad_y where x was inside [min, max] (y == x,
// bounds included, as PyTorch), else 0; backward recomputes y from the saved x rather than saving
// both.
#include <cmath>
#include <limits>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Clamp {
  static constexpr const char* kName = "clamp";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, double lo, double hi) {
    check_floating(kName, "input", x);
    ctx.save(x);
    ctx.set_attrs(std::make_pair(lo, hi));
    return unary_kernel(backend::UnaryKind::Clamp, x, lo, hi);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [lo, hi] = ctx.attrs<std::pair<double, double>>();
    const Tensor& x = ctx.saved(0);
    const Tensor inside = binary_kernel(kName, backend::BinaryKind::Eq, unary_kernel(backend::UnaryKind::Clamp, x, lo, hi), x);
    return {grad_y * inside.to(grad_y.dtype())};
  }
};
DEMI_REGISTER_OP(Clamp)

}  // namespace demi::ops

namespace demi::ops {
std::pair<double, double> clamp_bounds(const char* op, std::optional<double> min, std::optional<double> max) {
  DEMI_CHECK(min || max, op, ": at least one of min and max must be given");
  DEMI_CHECK(!(min && std::isnan(*min)) && !(max && std::isnan(*max)), op, ": a bound is NaN");
  const double inf = std::numeric_limits<double>::infinity();
  return {min.value_or(-inf), max.value_or(inf)};
}
}  // namespace demi::ops

namespace demi {
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  const auto [lo, hi] = ops::clamp_bounds("clamp", min, max);
  return ops::apply<ops::Clamp>(x, lo, hi);
}
}  // namespace demi

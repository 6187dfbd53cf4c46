// clamp: y = min(max(x, min), max), NaN kept. grad_x = grad_y where min < x < max, else 0: the
// bounds themselves and NaN get 0, and each bound compares in x's dtype (a bf16 x of 0.69921875 is
// at a max of 0.7), as PyTorch 2.15 does (crosscheck/). An absent bound is not tested.
#include <cmath>
#include <limits>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Clamp {
  static constexpr const char* kName = "clamp";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x, double lo, double hi) {
    check_floating(kName, "input", x);
    ctx.save(x);
    ctx.set_attrs(std::make_pair(lo, hi));
    return unary_kernel(backend::UnaryKind::Clamp, x, lo, hi);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [lo, hi] = ctx.attrs<std::pair<double, double>>();
    const Tensor& x = ctx.saved(0);
    Tensor inside;
    if (!std::isinf(lo)) inside = (x > lo).to(grad_y.dtype());
    if (!std::isinf(hi)) inside = inside.defined() ? inside * (x < hi).to(grad_y.dtype()) : (x < hi).to(grad_y.dtype());
    // A select (ReluBackward: 0 where inside <= 0), not a product: an inf gradient outside gives 0.
    return {binary_kernel(kName, backend::BinaryKind::ReluBackward, grad_y, inside)};
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

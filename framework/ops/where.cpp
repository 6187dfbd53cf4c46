// where: y = cond ? a : b, cond (uint8), a and b broadcast together; a select through the backend's
// where kernel (never a * m + b * (1 - m), where an inf in the branch not taken would give NaN).
// grad_a = where(cond, grad_y, 0) and grad_b = where(cond, 0, grad_y), each summed to its shape.
// masked_fill(x, mask, value) is where(mask, value, x).
#include <cmath>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Where {
  static constexpr const char* kName = "where";
  static constexpr amp::Category kCast = amp::Category::Promote;

  static Tensor forward(OpContext& ctx, const Tensor& cond, const Tensor& a, const Tensor& b) {
    const DType dtype = result_type(a.dtype(), a.dim(), b.dtype(), b.dim());
    const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), kName), b.shape(), kName);
    ctx.save(ctx.needs_grad(1) || ctx.needs_grad(2) ? cond : Tensor());
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    return where_kernel(cond, a.to(dtype), b.to(dtype), shape);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    const Tensor& cond = ctx.saved(0);
    const Tensor zero = zeros({}, grad_y.dtype(), grad_y.device());
    return {Tensor(),
            ctx.needs_grad(1) ? sum_to(where_kernel(cond, grad_y, zero, grad_y.shape()), shape_a) : Tensor(),
            ctx.needs_grad(2) ? sum_to(where_kernel(cond, zero, grad_y, grad_y.shape()), shape_b) : Tensor()};
  }
};
DEMI_REGISTER_OP(Where)

Tensor where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor y = empty(shape, a.dtype(), a.device());
  kernels(y).where(cond.ref(), a.ref(), b.ref(), y.ref());
  return y;
}

}  // namespace demi::ops

namespace demi {
namespace {

void check_mask(const char* op, const char* what, const Tensor& mask) {
  DEMI_CHECK(mask.defined(), op, ": ", what, " is undefined");
  DEMI_CHECK(mask.dtype() == DType::U8, op, ": ", what, " must be a uint8 mask (what comparisons such as x > 0 "
             "return), got ", mask.dtype(), "; compare first (x != 0)");
}

// A scalar operand: a 0-d tensor of the tensor operand's dtype (PyTorch's scalars do not widen a
// tensor), float32 beside an integer tensor when the value is not a whole number.
Tensor scalar_beside(const Tensor& t, double value) {
  DEMI_CHECK(t.defined(), "where: an operand is undefined");
  const bool keep = is_floating(t.dtype()) || std::trunc(value) == value;
  return full({}, value, keep ? t.dtype() : DType::F32, t.device());
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_mask("where", "cond", cond);
  DEMI_CHECK(a.defined() && b.defined(), "where: an operand is undefined");
  ops::check_same_device("where", cond, a);
  ops::check_same_device("where", a, b);
  broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  return ops::apply<ops::Where>(cond, a, b);
}
Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_beside(a, b)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalar_beside(b, a), b); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  DEMI_CHECK(x.defined(), "masked_fill: the input is undefined");
  check_mask("masked_fill", "mask", mask);
  ops::check_same_device("masked_fill", x, mask);
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  DEMI_CHECK(is_floating(x.dtype()) || std::trunc(value) == value, "masked_fill: the value ", value,
             " is not a whole number and the tensor is ", x.dtype(), "; convert the tensor to a floating dtype first");
  return where(mask, scalar_beside(x, value), x);
}

}  // namespace demi

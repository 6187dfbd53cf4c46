// Comparisons (eq, ne, lt, le, gt, ge) and the element tests (isfinite, isnan, isinf): not
// differentiable, so not ops of the table; the result is a uint8 mask of 0 and 1 (PyTorch's bool:
// demi has no bool dtype). Operands compare in their result
// type (PyTorch's promotion, 0-d tensors and scalars included); two integer tensors compare in
// float64, exact for |values| < 2^53 (labels, indices).
#include <limits>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi {
namespace {

Tensor compare(const char* op, backend::BinaryKind kind, const Tensor& a, const Tensor& b) {
  DEMI_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  ops::check_same_device(op, a, b);
  NoGradGuard no_grad;
  const DType dtype = is_floating(a.dtype()) || is_floating(b.dtype())
                          ? result_type(a.dtype(), a.dim(), b.dtype(), b.dim())
                          : DType::F64;
  const Tensor mask = ops::binary_kernel(op, kind, a.to(dtype), b.to(dtype));
  return mask.to(DType::U8);
}

// A scalar operand: a 0-d float64 tensor, which takes a's dtype when a is floating (PyTorch's
// scalars) and compares in float64 against an integer a.
Tensor scalar_like(const Tensor& a, double value) { return full({}, value, DType::F64, a.device()); }

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", backend::BinaryKind::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", backend::BinaryKind::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", backend::BinaryKind::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", backend::BinaryKind::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", backend::BinaryKind::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", backend::BinaryKind::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor ne(const Tensor& a, double b) { return ne(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }
Tensor le(const Tensor& a, double b) { return le(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }
Tensor ge(const Tensor& a, double b) { return ge(a, scalar_like(a, b)); }

// x - x is 0 exactly for a finite x and NaN for inf and NaN; NaN is the one value unequal to itself.
Tensor isfinite(const Tensor& x) {
  DEMI_CHECK(x.defined(), "isfinite: the input is undefined");
  NoGradGuard no_grad;
  if (!is_floating(x.dtype())) return full(x.shape(), 1.0, DType::U8, x.device());
  return eq(x - x, 0.0);
}
Tensor isnan(const Tensor& x) {
  DEMI_CHECK(x.defined(), "isnan: the input is undefined");
  return ne(x, x);
}
Tensor isinf(const Tensor& x) {
  DEMI_CHECK(x.defined(), "isinf: the input is undefined");
  NoGradGuard no_grad;
  if (!is_floating(x.dtype())) return zeros(x.shape(), DType::U8, x.device());
  return eq(abs(x), std::numeric_limits<double>::infinity());
}

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

}  // namespace demi

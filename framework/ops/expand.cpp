// expand: x broadcast to a larger shape (numpy rules: new dims lead, extent-1 dims grow). PyTorch
// returns a stride-0 view; demi tensors have no strides, so this is a copy (through the where kernel
// with a true condition: the bits of x, any dtype), and writes into it do not reach x. The gradient
// is grad_y summed back to x's shape.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Expand {
  static constexpr const char* kName = "expand";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, const Shape& shape) {
    ctx.set_attrs(x.shape());
    return where_kernel(full({}, 1, DType::U8, x.device()), x, x, shape);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {sum_to(grad_y, ctx.attrs<Shape>())}; }
};
DEMI_REGISTER_OP(Expand)

}  // namespace demi::ops

namespace demi {
Tensor expand(const Tensor& x, const Shape& shape) {
  DEMI_CHECK(x.defined(), "expand: the input is undefined");
  const size_t n = x.shape().size(), m = shape.size();
  DEMI_CHECK(m >= n, "expand: the shape ", shape, " has fewer dims than the tensor's ", x.shape(),
             "; give one extent (or -1) per dim, new dims first");
  Shape target = shape;
  const size_t lead = m - n;
  for (size_t i = 0; i < m; ++i) {
    if (i < lead) {
      DEMI_CHECK(shape[i] >= 0, "expand: the new leading dim ", i, " has extent ", shape[i], " in ", shape,
                 "; -1 (keep) applies only to the tensor's own dims");
      continue;
    }
    const int64_t own = x.shape()[i - lead];
    if (shape[i] == -1) target[i] = own;
    DEMI_CHECK(target[i] == own || (own == 1 && target[i] >= 0), "expand: dim ", i - lead, " of the tensor of shape ",
               x.shape(), " has extent ", own, ", which cannot become ", shape[i], " (", shape,
               "); only extent-1 dims expand, -1 keeps one");
  }
  if (target == x.shape()) return x;  // PyTorch returns a view of x here: the same values, shared
  return ops::apply<ops::Expand>(x, target);
}
}  // namespace demi

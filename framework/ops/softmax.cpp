// softmax over the last dimension, computed in fp32 by the kernel; saves its output, which is all
// backward needs: grad_x = y * (grad_y - sum(grad_y * y)).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Softmax {
  static constexpr const char* kName = "softmax";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    Tensor y = empty_like(x);
    kernels(x).softmax_forward(backend::SoftmaxKind::Softmax, x.ref(), y.ref());
    ctx.save(y);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    Tensor grad_x = empty_like(grad_y);
    kernels(grad_y).softmax_backward(backend::SoftmaxKind::Softmax, ctx.saved(0).ref(), grad_y.ref(), grad_x.ref());
    return {grad_x};
  }
};
DEMI_REGISTER_OP(Softmax)

void check_last_dim(const char* op, const Tensor& x, int64_t dim) {
  check_floating(op, "input", x);
  DEMI_CHECK(x.dim() >= 1, op, ": input must have at least one dimension, got a 0-d tensor");
  DEMI_CHECK(dim == -1 || dim == x.dim() - 1, op, ": only the last dimension is supported (dim=-1 or ",
             x.dim() - 1, "), got dim=", dim, " for shape ", x.shape(), "; move that dimension last first");
}

}  // namespace demi::ops

namespace demi {
Tensor softmax(const Tensor& x, int64_t dim) {
  ops::check_last_dim("softmax", x, dim);
  return ops::apply<ops::Softmax>(x);
}
}  // namespace demi

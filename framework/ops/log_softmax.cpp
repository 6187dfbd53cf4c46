// log_softmax over the last dimension, fp32 math in the kernel; saves its output:
// grad_x = grad_y - exp(y) * sum(grad_y).
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

void check_last_dim(const char* op, const Tensor& x, int64_t dim);  // softmax.cpp

struct LogSoftmax {
  static constexpr const char* kName = "log_softmax";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  static Tensor forward(OpContext& ctx, const Tensor& x) {
    Tensor y = empty_like(x);
    kernels(x).softmax_forward(backend::SoftmaxKind::LogSoftmax, x.ref(), y.ref());
    ctx.save(y);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    Tensor grad_x = empty_like(grad_y);
    kernels(grad_y).softmax_backward(backend::SoftmaxKind::LogSoftmax, ctx.saved(0).ref(), grad_y.ref(),
                                     grad_x.ref());
    return {grad_x};
  }
};
DEMI_REGISTER_OP(LogSoftmax)

}  // namespace demi::ops

namespace demi {
Tensor log_softmax(const Tensor& x, int64_t dim) {
  ops::check_last_dim("log_softmax", x, dim);
  return ops::apply<ops::LogSoftmax>(x);
}
}  // namespace demi

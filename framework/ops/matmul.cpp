// matmul: [M, K] @ [K, N], or batched [B, M, K] @ [B, K, N]; [B, M, K] @ [K, N] folds the batch
// into M (contiguous storage makes that a view). grad_a = grad_y @ b^T, grad_b = a^T @ grad_y.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

using backend::Transpose;

struct Matmul {
  static constexpr const char* kName = "matmul";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;

  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(a.dtype() == b.dtype(), "matmul: operands have different dtypes (", a.dtype(), " and ", b.dtype(),
               "); convert one with .to(dtype) or run under autocast");
    ctx.save(ctx.needs_grad(1) ? a : Tensor());
    ctx.save(ctx.needs_grad(0) ? b : Tensor());
    return gemm(a, Transpose::No, b, Transpose::No);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {ctx.needs_grad(0) ? gemm(grad_y, Transpose::No, ctx.saved(1), Transpose::Yes) : Tensor(),
            ctx.needs_grad(1) ? gemm(ctx.saved(0), Transpose::Yes, grad_y, Transpose::No) : Tensor()};
  }
};
DEMI_REGISTER_OP(Matmul)

}  // namespace demi::ops

namespace demi {
Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_floating("matmul", "first operand", a);
  ops::check_floating("matmul", "second operand", b);
  ops::check_same_device("matmul", a, b);
  DEMI_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && (b.dim() == 2 || b.dim() == 3)),
             "matmul: supports [M, K] @ [K, N] and [B, M, K] @ [B, K, N] or [K, N], got ", a.shape(), " @ ", b.shape());
  DEMI_CHECK(a.size(-1) == b.size(-2), "matmul: inner dimensions differ: ", a.shape(), " @ ", b.shape(),
             " (", a.size(-1), " vs ", b.size(-2), ")");
  if (a.dim() == 3 && b.dim() == 2) {
    const int64_t batch = a.size(0), m = a.size(1);
    return matmul(a.reshape({batch * m, a.size(2)}), b).reshape({batch, m, b.size(1)});
  }
  if (b.dim() == 3) {
    DEMI_CHECK(a.size(0) == b.size(0), "matmul: batch sizes differ: ", a.shape(), " @ ", b.shape());
  }
  return ops::apply<ops::Matmul>(a, b);
}
}  // namespace demi

// linear: y = x @ weight^T + bias over the last dim of x, the bias fused into the GEMM.
// grad_x = grad_y @ weight, grad_weight = grad_y^T @ x, grad_bias = grad_y summed over rows.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

using backend::Transpose;

struct Linear {
  static constexpr const char* kName = "linear";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;

  // x is [M, in] here; linear() folds leading dims into M.
  static Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(x.dtype() == weight.dtype(), "linear: input is ", x.dtype(), " but weight is ", weight.dtype(),
               "; convert one with .to(dtype) or run under autocast");
    DEMI_CHECK(!bias.defined() || bias.dtype() == x.dtype(), "linear: bias is ", bias.dtype(), " but input is ",
               x.dtype(), "; convert it with .to(dtype) or run under autocast");
    ctx.save(ctx.needs_grad(1) ? x : Tensor());
    ctx.save(ctx.needs_grad(0) ? weight : Tensor());
    return gemm(x, Transpose::No, weight, Transpose::Yes, bias);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {ctx.needs_grad(0) ? gemm(grad_y, Transpose::No, ctx.saved(1), Transpose::No) : Tensor(),
            ctx.needs_grad(1) ? gemm(grad_y, Transpose::Yes, ctx.saved(0), Transpose::No) : Tensor(),
            ctx.needs_grad(2) ? reduce_keepdim(backend::ReduceKind::Sum, grad_y, {0}, grad_y.dtype()).reshape({grad_y.size(1)})
                              : Tensor()};
  }
};
DEMI_REGISTER_OP(Linear)

}  // namespace demi::ops

namespace demi {
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ops::check_floating("linear", "input", x);
  ops::check_floating("linear", "weight", weight);
  ops::check_same_device("linear", x, weight);
  ops::check_dim("linear", "weight", weight, 2, "[out_features, in_features]");
  if (!(x.dim() >= 1 && x.size(-1) == weight.size(1))) {
    // [N, C, H, W] straight from a conv or pool, whose C * H * W is in_features: a Flatten is missing.
    const bool flatten_missing = x.dim() > 2 && x.size(0) > 0 && x.numel() / x.size(0) == weight.size(1);
    DEMI_THROW("linear: input of shape ", x.shape(), " has ", (x.dim() ? x.size(-1) : 0),
               " features but weight ", weight.shape(), " expects ", weight.size(1),
               flatten_missing ? "; its dims after the first hold that many: add an nn::Flatten (or "
                                 "x.reshape({N, -1})) before the Linear"
                               : "");
  }
  if (bias.defined()) {
    ops::check_floating("linear", "bias", bias);
    ops::check_same_device("linear", x, bias);
    DEMI_CHECK(bias.shape() == Shape{weight.size(0)}, "linear: bias must be [", weight.size(0), "], got ", bias.shape());
  }
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  const Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  return ops::apply<ops::Linear>(x2, weight, bias).reshape(out_shape);
}
}  // namespace demi

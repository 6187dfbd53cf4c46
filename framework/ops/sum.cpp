// sum over dims: grad_x is grad_y broadcast back over the reduced dims.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"

namespace demi::ops {

struct Sum {
  static constexpr const char* kName = "sum";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  static Tensor forward(OpContext& ctx, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
    check_floating(kName, "input", x);
    const std::vector<int64_t> d = normalize_dims(kName, x, dims);
    const Shape kept = reduced_shape(x.shape(), d, true);
    ctx.set_attrs(std::make_pair(x.shape(), kept));
    return reduce_keepdim(backend::ReduceKind::Sum, x, d, x.dtype()).reshape(reduced_shape(x.shape(), d, keepdim));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape, kept] = ctx.attrs<std::pair<Shape, Shape>>();
    return {expand_to(grad_y.reshape(kept), shape)};
  }
};
DEMI_REGISTER_OP(Sum)

}  // namespace demi::ops

namespace demi {
Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  if (x.defined() && !is_floating(x.dtype())) {  // a mask or labels: int64, as PyTorch sums integers
    NoGradGuard no_grad;  // exact in float64 below 2^53
    return ops::apply<ops::Sum>(x.to(DType::F64), dims, keepdim).to(DType::I64);
  }
  return ops::apply<ops::Sum>(x, dims, keepdim);
}
}  // namespace demi

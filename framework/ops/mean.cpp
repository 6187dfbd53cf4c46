// mean over dims: grad_x is grad_y / count broadcast back over the reduced dims.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"

namespace demi::ops {

struct Mean {
  static constexpr const char* kName = "mean";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  static Tensor forward(OpContext& ctx, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
    check_floating(kName, "input", x);
    const std::vector<int64_t> d = normalize_dims(kName, x, dims);
    const Shape kept = reduced_shape(x.shape(), d, true);
    ctx.set_attrs(std::make_pair(x.shape(), kept));
    return reduce_keepdim(backend::ReduceKind::Mean, x, d, x.dtype()).reshape(reduced_shape(x.shape(), d, keepdim));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape, kept] = ctx.attrs<std::pair<Shape, Shape>>();
    const double count = static_cast<double>(shape_numel(shape)) / static_cast<double>(shape_numel(kept));
    return {expand_to(grad_y.reshape(kept) / count, shape)};
  }
};
DEMI_REGISTER_OP(Mean)

}  // namespace demi::ops

namespace demi {
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return ops::apply<ops::Mean>(x, dims, keepdim);
}
}  // namespace demi

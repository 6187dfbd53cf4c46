// permute: the dims reordered (y.shape[i] = x.shape[dims[i]]) into a new contiguous tensor, a copy
// through the backend's permute kernel as transpose (demi tensors have no strides, so not a view);
// the gradient is grad_y permuted back by the inverse permutation.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Permute {
  static constexpr const char* kName = "permute";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  // dims: a permutation of 0 .. x.dim() - 1.
  static Tensor forward(OpContext& ctx, const Tensor& x, const std::vector<int64_t>& dims) {
    ctx.set_attrs(dims);
    Shape shape;
    for (int64_t d : dims) shape.push_back(x.size(d));
    Tensor y = empty(shape, x.dtype(), x.device());
    kernels(x).permute(x.ref(), y.ref(), dims);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& dims = ctx.attrs<std::vector<int64_t>>();
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
    return {permute(grad_y, inverse)};
  }
};
DEMI_REGISTER_OP(Permute)

}  // namespace demi::ops

namespace demi {
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  DEMI_CHECK(x.defined(), "permute: the input is undefined");
  const int64_t n = x.dim();
  DEMI_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: dims ", dims, " must name each of the ", n,
             " dims of the tensor of shape ", x.shape(), " once");
  DEMI_CHECK(n <= 8, "permute: tensors of up to 8 dims, got shape ", x.shape());
  std::vector<int64_t> order(dims);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t& d = order[i];
    DEMI_CHECK(d >= -n && d < n, "permute: dim ", d, " out of range for a tensor of shape ", x.shape());
    if (d < 0) d += n;
    DEMI_CHECK(!seen[static_cast<size_t>(d)], "permute: dim ", dims[i], " appears twice in ", dims,
               "; each dim must appear once");
    seen[static_cast<size_t>(d)] = true;
    identity = identity && d == static_cast<int64_t>(i);
  }
  if (identity) return x;  // PyTorch returns a view of x here: the same values, shared
  return ops::apply<ops::Permute>(x, order);
}
}  // namespace demi

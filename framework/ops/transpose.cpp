// transpose: swaps two dims into a new contiguous tensor (demi tensors have no strides, so this is
// a copy through the backend's permute, not a view); the gradient is the same swap of grad_y.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Transpose {
  static constexpr const char* kName = "transpose";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, int64_t dim0, int64_t dim1) {
    ctx.set_attrs(std::make_pair(dim0, dim1));
    std::vector<int64_t> dims(static_cast<size_t>(x.dim()));
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
    std::swap(dims[static_cast<size_t>(dim0)], dims[static_cast<size_t>(dim1)]);
    Shape shape = x.shape();
    std::swap(shape[static_cast<size_t>(dim0)], shape[static_cast<size_t>(dim1)]);
    Tensor y = empty(shape, x.dtype(), x.device());
    kernels(x).permute(x.ref(), y.ref(), dims);
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [dim0, dim1] = ctx.attrs<std::pair<int64_t, int64_t>>();
    return {transpose(grad_y, dim0, dim1)};
  }
};
DEMI_REGISTER_OP(Transpose)

}  // namespace demi::ops

namespace demi {
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t n = x.dim();
  for (int64_t d : {dim0, dim1}) {
    DEMI_CHECK(d >= -n && d < n, "transpose: dim ", d, " out of range for a tensor of shape ", x.shape());
  }
  DEMI_CHECK(n <= 8, "transpose: tensors of up to 8 dims, got shape ", x.shape());
  if (dim0 < 0) dim0 += n;
  if (dim1 < 0) dim1 += n;
  if (dim0 == dim1) return x;  // PyTorch returns a view of x here: the same values, shared
  return ops::apply<ops::Transpose>(x, std::min(dim0, dim1), std::max(dim0, dim1));
}
}  // namespace demi

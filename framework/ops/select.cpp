// select: row `index` of dim 0 as a view sharing x's storage (writes through it reach x, as in
// PyTorch's x[i]); grad_x is zero except that row, which is grad_y.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

struct Select {
  static constexpr const char* kName = "select";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, int64_t index) {
    ctx.set_attrs(std::make_pair(x.shape(), index));
    const TensorImpl& self = x.impl_ref();
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = self.storage;
    impl->shape = Shape(self.shape.begin() + 1, self.shape.end());
    impl->dtype = self.dtype;
    impl->offset = self.offset + static_cast<size_t>(index * shape_numel(impl->shape)) * dtype_size(self.dtype);
    return Tensor(std::move(impl));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape, index] = ctx.attrs<std::pair<Shape, int64_t>>();
    Tensor grad_x = zeros(shape, grad_y.dtype(), grad_y.device());
    const Tensor row = grad_x.slice(index, index + 1);
    kernels(grad_y).copy(grad_y.data_ptr(), row.data_ptr(), grad_y.nbytes());
    return {grad_x};
  }
};
DEMI_REGISTER_OP(Select)

}  // namespace demi::ops

namespace demi {
Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  DEMI_CHECK(x.dim() >= 1, "select: needs at least one dimension, got a 0-d tensor");
  DEMI_CHECK(dim == 0 || dim == -x.dim(), "select: only dim 0 can be selected as a view (demi tensors are "
             "contiguous), got dim ", dim, "; transpose(x, 0, ", dim, ") first");
  const int64_t rows = x.size(0);
  DEMI_CHECK(index >= -rows && index < rows, "select: index ", index, " is out of range for dim 0 of extent ", rows,
             " (shape ", x.shape(), ")");
  return ops::apply<ops::Select>(x, index < 0 ? index + rows : index);
}
}  // namespace demi

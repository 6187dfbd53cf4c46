// reshape: a zero-copy view with a new shape (storage is contiguous); grad_x = grad_y reshaped back.
#include "framework/ops/internal.h"

namespace demi::ops {

struct Reshape {
  static constexpr const char* kName = "reshape";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(OpContext& ctx, const Tensor& x, const Shape& shape) {
    ctx.set_attrs(x.shape());
    const TensorImpl& self = x.impl_ref();
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = self.storage;
    impl->offset = self.offset;
    impl->shape = shape;
    impl->dtype = self.dtype;
    return Tensor(std::move(impl));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y.reshape(ctx.attrs<Shape>())}; }
};
DEMI_REGISTER_OP(Reshape)

// Tensor::reshape validates the shape and resolves -1 before calling this.
Tensor reshape(const Tensor& x, const Shape& shape) { return apply<Reshape>(x, shape); }

}  // namespace demi::ops

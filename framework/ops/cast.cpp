// cast: converts to another dtype (round to nearest even). The gradient returns in the source
// dtype, so an fp32 parameter cast to fp16 receives an fp32 .grad.
#include "framework/ops/internal.h"

namespace demi::ops {

struct Cast {
  static constexpr const char* kName = "cast";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x, DType dtype) {
    ctx.set_attrs(x.dtype());
    Tensor y = empty_like(x, dtype);
    kernels(x).cast(x.storage_ref(), y.storage_ref());  // y keeps x's format
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y.to(ctx.attrs<DType>())}; }
};
DEMI_REGISTER_OP(Cast)

Tensor cast(const Tensor& x, DType dtype) { return apply<Cast>(x, dtype); }

}  // namespace demi::ops

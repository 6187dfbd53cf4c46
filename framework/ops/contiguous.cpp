// contiguous(format): the same values stored in another memory format, a copy through the permute
// kernel (NCHW [N, C, H, W] <-> NHWC [N, H, W, C]); the gradient is converted back.
#include "framework/ops/internal.h"

namespace demi::ops {

struct ToMemoryFormat {
  static constexpr const char* kName = "contiguous";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x, MemoryFormat format) {
    const MemoryFormat from = x.suggest_memory_format();
    ctx.set_attrs(from);
    Tensor y = empty(x.shape(), x.dtype(), x.device(), format);
    if (from == y.suggest_memory_format()) {  // nothing to reorder (the caller checks this too)
      kernels(x).copy(x.data_ptr(), y.data_ptr(), x.nbytes());
    } else if (format == MemoryFormat::ChannelsLast) {
      kernels(x).permute(x.ref(), y.storage_ref(), {0, 2, 3, 1});
    } else {
      kernels(x).permute(x.storage_ref(), y.ref(), {0, 3, 1, 2});
    }
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    return {grad_y.contiguous(ctx.attrs<MemoryFormat>())};
  }
};
DEMI_REGISTER_OP(ToMemoryFormat)

Tensor to_memory_format(const Tensor& x, MemoryFormat format) { return apply<ToMemoryFormat>(x, format); }

}  // namespace demi::ops

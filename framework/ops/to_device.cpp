// to_device: copies a tensor to another device (through the host when neither side is the CPU);
// the gradient is copied back.
#include "framework/ops/internal.h"

namespace demi::ops {

namespace {
Tensor copy_to(const Tensor& x, const Device& device) {
  Tensor y = empty(x.shape(), x.dtype(), device, x.suggest_memory_format());  // the bytes as they are
  if (x.device().is_cpu()) {
    kernels(y).copy_from_host(x.data_ptr(), y.data_ptr(), x.nbytes());
  } else if (device.is_cpu()) {
    kernels(x).copy_to_host(x.data_ptr(), y.data_ptr(), x.nbytes());
  } else {
    Tensor host = copy_to(x, Device::cpu());
    kernels(y).copy_from_host(host.data_ptr(), y.data_ptr(), x.nbytes());
  }
  return y;
}
}  // namespace

struct ToDevice {
  static constexpr const char* kName = "to_device";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x, const Device& device) {
    ctx.set_attrs(x.device());
    return copy_to(x, device);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) { return {grad_y.to(ctx.attrs<Device>())}; }
};
DEMI_REGISTER_OP(ToDevice)

Tensor to_device(const Tensor& x, const Device& device) { return apply<ToDevice>(x, device); }

}  // namespace demi::ops

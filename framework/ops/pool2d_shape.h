// PoolGeometry: the validated window of a 2-D pooling op and the output shape it gives.
#pragma once

#include "framework/ops/internal.h"

namespace demi::ops {

struct PoolGeometry {
  int kernel_h, kernel_w, stride_h, stride_w, pad;
  bool nhwc = false;  // set by the op's forward: its kernels run channels_last (runs_channels_last)

  // stride 0 means stride = kernel, as PyTorch's default.
  static PoolGeometry make(const char* op, const Tensor& x, int kernel_h, int kernel_w, int stride, int padding) {
    check_floating(op, "input", x);
    check_dim(op, "input", x, 4, "[N, C, H, W]");
    DEMI_CHECK(kernel_h >= 1 && kernel_w >= 1 && stride >= 0 && padding >= 0, op, ": kernel ", kernel_h, "x",
               kernel_w, ", stride ", stride, ", padding ", padding, " is invalid; need kernel >= 1, stride >= 0, padding >= 0");
    DEMI_CHECK(2 * padding <= std::min(kernel_h, kernel_w), op, ": padding ", padding,
               " must be at most half the kernel size ", kernel_h, "x", kernel_w);
    PoolGeometry g{kernel_h, kernel_w, stride ? stride : kernel_h, stride ? stride : kernel_w, padding, false};
    DEMI_CHECK(x.size(2) + 2 * padding >= kernel_h && x.size(3) + 2 * padding >= kernel_w, op, ": kernel ",
               kernel_h, "x", kernel_w, " is larger than the padded input of shape ", x.shape());
    return g;
  }
  MemoryFormat format() const { return kernel_format(nhwc); }
  Shape output_shape(const Shape& in) const {
    return {in[0], in[1], (in[2] + 2 * pad - kernel_h) / stride_h + 1, (in[3] + 2 * pad - kernel_w) / stride_w + 1};
  }
  backend::Pool2dArgs args(backend::PoolKind kind) const {
    backend::Pool2dArgs a;
    a.kind = kind;
    a.kernel_h = kernel_h;
    a.kernel_w = kernel_w;
    a.stride_h = stride_h;
    a.stride_w = stride_w;
    a.pad_h = a.pad_w = pad;
    a.channels_last = nhwc;
    return a;
  }
};

}  // namespace demi::ops

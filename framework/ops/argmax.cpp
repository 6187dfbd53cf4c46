// argmax / argmin: int64 indices of the first maximum (minimum) along a dim (or of the flattened
// tensor), not differentiable; NaN counts as the extreme, as in PyTorch. Integer inputs are read as
// float64.
#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi {
namespace {

Tensor arg_reduce(bool is_min, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* name = is_min ? "argmin" : "argmax";
  DEMI_CHECK(x.defined(), name, ": the input is undefined");
  NoGradGuard no_grad;
  const Tensor values = is_floating(x.dtype()) ? x : x.to(DType::F64);
  const int64_t n = x.dim();
  int64_t outer = 1, reduced = x.numel(), inner = 1;
  Shape out_shape(static_cast<size_t>(keepdim ? n : 0), 1);  // all dims: 0-d, or all ones kept
  if (dim) {
    int64_t d = *dim;
    DEMI_CHECK((n == 0 && (d == 0 || d == -1)) || (d >= -n && d < n), name, ": dim ", d,
               " out of range for a tensor of shape ", x.shape());
    if (d < 0) d += std::max<int64_t>(n, 1);
    out_shape.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (i < d) outer *= x.size(i);
      if (i > d) inner *= x.size(i);
      if (i != d || keepdim) out_shape.push_back(i == d ? 1 : x.size(i));
    }
    reduced = n == 0 ? 1 : x.size(d);
  }
  DEMI_CHECK(reduced > 0 || outer * inner == 0, name, ": the input ", x.shape(),
             " is empty along the reduced dim, so it has no ", is_min ? "minimum" : "maximum");
  Tensor y = empty({outer, 1, inner}, DType::I64, x.device());
  const backend::TensorRef in = values.reshape({outer, reduced, inner}).ref();
  if (is_min) kernels(x).argmin(in, y.ref());
  else kernels(x).argmax(in, y.ref());
  return y.reshape(out_shape);
}

}  // namespace

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_reduce(false, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_reduce(true, x, dim, keepdim); }

}  // namespace demi

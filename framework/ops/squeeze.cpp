// unsqueeze / squeeze: an extent-1 dim inserted or removed, a view sharing x's storage (reshape, and
// its gradient); dims count from the end when negative, as in PyTorch.
#include "framework/ops/ops.h"

namespace demi {

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  DEMI_CHECK(x.defined(), "unsqueeze: the input is undefined");
  const int64_t n = x.dim();
  DEMI_CHECK(dim >= -n - 1 && dim <= n, "unsqueeze: dim ", dim, " out of range for a tensor of shape ", x.shape(),
             " (a new dim goes at [", -n - 1, ", ", n, "])");
  if (dim < 0) dim += n + 1;
  Shape shape = x.shape();
  shape.insert(shape.begin() + dim, 1);
  return x.reshape(shape);
}

Tensor squeeze(const Tensor& x) {
  DEMI_CHECK(x.defined(), "squeeze: the input is undefined");
  Shape shape;
  for (int64_t extent : x.shape()) {
    if (extent != 1) shape.push_back(extent);
  }
  return x.reshape(shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  DEMI_CHECK(x.defined(), "squeeze: the input is undefined");
  const int64_t n = x.dim();
  DEMI_CHECK((n == 0 && (dim == 0 || dim == -1)) || (dim >= -n && dim < n), "squeeze: dim ", dim,
             " out of range for a tensor of shape ", x.shape());
  if (n == 0) return x;
  if (dim < 0) dim += n;
  if (x.size(dim) != 1) return x;  // as PyTorch: a dim of another extent stays
  Shape shape = x.shape();
  shape.erase(shape.begin() + dim);
  return x.reshape(shape);
}

}  // namespace demi

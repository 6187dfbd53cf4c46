// max(x, dim) / min(x, dim): the values and the int64 indices of each slice's first maximum
// (minimum), NaN counting as the extreme (argmax's / argmin's indices). The indices are an input of
// the op (not differentiable); grad_x is grad_y at the indexed element of each slice, 0 elsewhere.
#include <tuple>
#include <type_traits>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

template <backend::ReduceKind K>
struct ExtremeDim {
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  // indices: x's shape with extent 1 at dim; dim is in [0, x.dim()).
  static Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& indices, int64_t dim, bool keepdim) {
    ctx.save(indices);
    ctx.set_attrs(std::make_pair(x.shape(), dim));
    return reduce_keepdim(K, x, {dim}, x.dtype()).reshape(reduced_shape(x.shape(), {dim}, keepdim));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape, dim] = ctx.attrs<std::pair<Shape, int64_t>>();
    const Tensor& indices = ctx.saved(0);
    Shape along(shape.size(), 1);  // 0, 1, ... R-1 along dim
    along[static_cast<size_t>(dim)] = shape[static_cast<size_t>(dim)];
    const Tensor position = arange(0, static_cast<double>(along[static_cast<size_t>(dim)]), 1, DType::I64,
                                   grad_y.device()).reshape(along);
    const Tensor zero = zeros({}, grad_y.dtype(), grad_y.device());
    return {where_kernel(position == indices, grad_y.reshape(indices.shape()), zero, shape), Tensor()};
  }
};

struct MaxDim : ExtremeDim<backend::ReduceKind::Max> {
  static constexpr const char* kName = "max_dim";
};
DEMI_REGISTER_OP(MaxDim)

struct MinDim : ExtremeDim<backend::ReduceKind::Min> {
  static constexpr const char* kName = "min_dim";
};
DEMI_REGISTER_OP(MinDim)

}  // namespace demi::ops

namespace demi {
namespace {

template <typename Op>
std::tuple<Tensor, Tensor> extreme_along(const Tensor& x, int64_t dim, bool keepdim) {
  constexpr bool is_min = std::is_same_v<Op, ops::MinDim>;
  const char* name = is_min ? "min" : "max";
  DEMI_CHECK(x.defined(), name, ": the input is undefined");
  const int64_t n = x.dim();
  DEMI_CHECK((n == 0 && (dim == 0 || dim == -1)) || (dim >= -n && dim < n), name, ": dim ", dim,
             " out of range for a tensor of shape ", x.shape());
  if (n == 0) {  // a 0-d tensor is its own extreme, at index 0
    auto [values, indices] = extreme_along<Op>(x.reshape({1}), 0, false);
    return {values, indices};
  }
  if (dim < 0) dim += n;
  int64_t slices = 1;
  for (int64_t i = 0; i < n; ++i) slices *= i == dim ? 1 : x.size(i);
  DEMI_CHECK(x.size(dim) > 0 || slices == 0, name, ": the input ", x.shape(), " is empty along dim ", dim,
             ", so it has no ", is_min ? "minimum" : "maximum");
  const Tensor indices = is_min ? argmin(x, dim, true) : argmax(x, dim, true);
  Shape out = ops::reduced_shape(x.shape(), {dim}, keepdim);
  if (!is_floating(x.dtype())) {  // compared in float64, exact below 2^53; not differentiable
    NoGradGuard no_grad;
    return {ops::apply<Op>(x.to(DType::F64), indices, dim, keepdim).to(x.dtype()), indices.reshape(out)};
  }
  return {ops::apply<Op>(x, indices, dim, keepdim), indices.reshape(out)};
}

}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along<ops::MaxDim>(x, dim, keepdim);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along<ops::MinDim>(x, dim, keepdim);
}

}  // namespace demi

// cat: tensors joined along `dim`. Inputs of different floating dtypes promote to the widest (as
// PyTorch's type promotion; under autocast cat is in the promote category). Rows of each input are
// device copies into their place, so any dtype and backend work; grad of each input is its block
// of grad_y, copied out the same way.
#include <numeric>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {
namespace {

// Copies, for each of `outer` rows, `chunk` bytes between a [outer, chunk] tensor and its place
// `offset` bytes into each [outer, row] row of a wider one (to_wide: into the wide one).
void copy_blocks(const Tensor& narrow, const Tensor& wide, int64_t outer, size_t chunk, size_t row, size_t offset,
                 bool to_wide) {
  if (chunk == 0) return;
  auto* n = static_cast<char*>(narrow.data_ptr());
  auto* w = static_cast<char*>(wide.data_ptr());
  backend::Kernels& k = kernels(wide);
  for (int64_t o = 0; o < outer; ++o) {
    char* wide_at = w + static_cast<size_t>(o) * row + offset;
    char* narrow_at = n + static_cast<size_t>(o) * chunk;
    if (to_wide) k.copy(narrow_at, wide_at, chunk);
    else k.copy(wide_at, narrow_at, chunk);
  }
}

// Product of the extents before dim (rows of the copy).
int64_t outer_extent(const Shape& shape, int64_t dim) {
  return std::accumulate(shape.begin(), shape.begin() + dim, int64_t{1}, std::multiplies<int64_t>());
}

}  // namespace

struct Cat {
  static constexpr const char* kName = "cat";
  static constexpr amp::Category kCast = amp::Category::Promote;

  static Tensor forward(OpContext& ctx, const std::vector<Tensor>& xs, int64_t dim) {
    DType dtype = xs[0].dtype();
    for (const Tensor& x : xs) dtype = promote_types(dtype, x.dtype());
    Shape shape = xs[0].shape();
    std::vector<int64_t> sizes;
    shape[static_cast<size_t>(dim)] = 0;
    for (const Tensor& x : xs) {
      sizes.push_back(x.size(dim));
      shape[static_cast<size_t>(dim)] += x.size(dim);
    }
    ctx.set_attrs(std::make_pair(dim, sizes));
    Tensor y = empty(shape, dtype, xs[0].device());
    const int64_t outer = outer_extent(shape, dim);
    const size_t row = static_cast<size_t>(y.numel() / std::max<int64_t>(outer, 1)) * dtype_size(dtype);
    size_t offset = 0;
    for (const Tensor& x : xs) {
      const Tensor cx = x.to(dtype);
      const size_t chunk = static_cast<size_t>(cx.numel() / std::max<int64_t>(outer, 1)) * dtype_size(dtype);
      copy_blocks(cx, y, outer, chunk, row, offset, true);
      offset += chunk;
    }
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [dim, sizes] = ctx.attrs<std::pair<int64_t, std::vector<int64_t>>>();
    const int64_t outer = outer_extent(grad_y.shape(), dim);
    const size_t row = static_cast<size_t>(grad_y.numel() / std::max<int64_t>(outer, 1)) * dtype_size(grad_y.dtype());
    TensorList grads;
    size_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Shape shape = grad_y.shape();
      shape[static_cast<size_t>(dim)] = sizes[i];
      Tensor g = empty(shape, grad_y.dtype(), grad_y.device());
      const size_t chunk = static_cast<size_t>(g.numel() / std::max<int64_t>(outer, 1)) * dtype_size(grad_y.dtype());
      if (ctx.needs_grad(i)) copy_blocks(g, grad_y, outer, chunk, row, offset, false);
      grads.push_back(ctx.needs_grad(i) ? g : Tensor());
      offset += chunk;
    }
    return grads;
  }
};
DEMI_REGISTER_OP(Cat)

}  // namespace demi::ops

namespace demi {
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  DEMI_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  const int64_t n = first.dim();
  DEMI_CHECK(n >= 1, "cat: zero-dimensional tensor 0 cannot be concatenated; reshape it to [1] first");
  DEMI_CHECK(dim >= -n && dim < n, "cat: dim ", dim, " out of range for tensors of shape ", first.shape());
  if (dim < 0) dim += n;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DEMI_CHECK(t.defined(), "cat: tensor ", i, " is undefined");
    DEMI_CHECK(is_floating(t.dtype()) == is_floating(first.dtype()), "cat: tensor ", i, " is ", t.dtype(),
               " but tensor 0 is ", first.dtype(), "; cast them to one kind (floating or integer) first");
    DEMI_CHECK(is_floating(t.dtype()) || t.dtype() == first.dtype(), "cat: integer tensors must share a dtype, got ",
               first.dtype(), " and ", t.dtype(), " (tensor ", i, ")");
    ops::check_same_device("cat", first, t);
    bool fits = t.dim() == n;
    for (int64_t d = 0; fits && d < n; ++d) fits = d == dim || t.size(d) == first.size(d);
    DEMI_CHECK(fits, "cat: tensor ", i, " has shape ", t.shape(), " but tensor 0 has ", first.shape(),
               "; all dims except dim ", dim, " must match");
  }
  return ops::apply<ops::Cat>(tensors, dim);
}
}  // namespace demi

// amax / amin over dims, and max(x) / min(x) over every element: the same op. The gradient is
// shared evenly among the elements equal to their slice's result: grad_y / count there, 0 elsewhere.
// PyTorch's two formulas differ at NaN, and each is kept: amax's (scale_grad_by_count) gives a slice
// whose result is NaN a NaN gradient (no element equals NaN: grad / 0 * 0); max(x)'s
// (evenly_distribute_backward) shares the gradient among the NaN elements.
#include <type_traits>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/ops/reduce_dims.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

template <backend::ReduceKind K>
struct Extreme {
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  // nan_shares: max(x)'s gradient rule (above), else amax's.
  static Tensor forward(OpContext& ctx, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                        bool nan_shares) {
    const std::vector<int64_t> d = normalize_dims(K == backend::ReduceKind::Max ? "amax" : "amin", x, dims);
    const Tensor y = reduce_keepdim(K, x, d, x.dtype());
    ctx.save(x);
    ctx.save(y);
    ctx.set_attrs(std::make_pair(d, nan_shares));
    return y.reshape(reduced_shape(x.shape(), d, keepdim));
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [dims, nan_shares] = ctx.attrs<std::pair<std::vector<int64_t>, bool>>();
    const Tensor& x = ctx.saved(0);
    const Tensor& y = ctx.saved(1);
    const DType dtype = grad_y.dtype();
    const Tensor share = grad_y.reshape(y.shape());
    if (!nan_shares) {  // scale_grad_by_count: (grad / count) * mask
      const Tensor hit = (x == y).to(dtype);
      return {share / reduce_keepdim(backend::ReduceKind::Sum, hit, dims, dtype) * hit};
    }
    // evenly_distribute_backward: grad / count written where the mask holds, +0 elsewhere
    Tensor hit = (x == y).to(dtype) + (x != x).to(dtype) * (y != y).to(dtype);
    const Tensor count = reduce_keepdim(backend::ReduceKind::Sum, hit, dims, dtype);
    return {where_kernel(hit.to(DType::U8), share / count, zeros({}, dtype, x.device()), x.shape())};
  }
};

struct Amax : Extreme<backend::ReduceKind::Max> {
  static constexpr const char* kName = "amax";
};
DEMI_REGISTER_OP(Amax)

struct Amin : Extreme<backend::ReduceKind::Min> {
  static constexpr const char* kName = "amin";
};
DEMI_REGISTER_OP(Amin)

}  // namespace demi::ops

namespace demi {
namespace {

// The caller's mistakes, named after the function called; then the op, an integer tensor compared
// in float64 (exact below 2^53) and returned in its own dtype, as PyTorch keeps it.
template <typename Op>
Tensor extreme(const char* name, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool nan_shares) {
  DEMI_CHECK(x.defined(), name, ": the input is undefined");
  const std::vector<int64_t> d = ops::normalize_dims(name, x, dims);
  int64_t reduced = 1;
  for (int64_t k : d) reduced *= x.size(k);
  const bool is_max = std::is_same_v<Op, ops::Amax>;
  DEMI_CHECK(reduced > 0 || shape_numel(ops::reduced_shape(x.shape(), d, true)) == 0, name,
             ": the input ", x.shape(), " is empty along the reduced dims, so it has no ",
             is_max ? "maximum" : "minimum", "; reduce over non-empty dims");
  if (!is_floating(x.dtype())) {
    NoGradGuard no_grad;
    return ops::apply<Op>(x.to(DType::F64), dims, keepdim, nan_shares).to(x.dtype());
  }
  return ops::apply<Op>(x, dims, keepdim, nan_shares);
}

}  // namespace

Tensor max(const Tensor& x) { return extreme<ops::Amax>("max", x, {}, false, true); }
Tensor min(const Tensor& x) { return extreme<ops::Amin>("min", x, {}, false, true); }
Tensor amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return extreme<ops::Amax>("amax", x, dims, keepdim, false);
}
Tensor amin(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return extreme<ops::Amin>("amin", x, dims, keepdim, false);
}

}  // namespace demi

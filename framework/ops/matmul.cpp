// matmul, as torch.matmul: [..., M, K] @ [..., K, N] with the batch dims broadcast. A second operand
// without batch (or with batch dims of extent 1) folds the first's batch into M (contiguous storage
// makes that a view): one GEMM. Otherwise the op runs [B, M, K] @ [B, K, N] as one batched GEMM, an
// operand whose batch dims are all 1 shared by every product (batch stride 0), one broadcast only in
// part expanded first. grad_a = grad_y @ b^T, grad_b = a^T @ grad_y, summed over the batch for a
// shared operand (expand's gradient sums the others).
#include <algorithm>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

using backend::Transpose;

struct Matmul {
  static constexpr const char* kName = "matmul";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;

  // a [M, K] and b [K, N], or a [Ba, M, K] and b [Bb, K, N] with Ba and Bb equal or 1.
  static Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(a.dtype() == b.dtype(), "matmul: operands have different dtypes (", a.dtype(), " and ", b.dtype(),
               "); convert one with .to(dtype) or run under autocast");
    ctx.set_attrs(std::make_pair(a.shape(), b.shape()));
    ctx.save(ctx.needs_grad(1) ? a : Tensor());
    ctx.save(ctx.needs_grad(0) ? b : Tensor());
    return gemm(a, Transpose::No, b, Transpose::No);
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const auto& [shape_a, shape_b] = ctx.attrs<std::pair<Shape, Shape>>();
    return {ctx.needs_grad(0) ? operand_grad(grad_y, Transpose::No, ctx.saved(1), Transpose::Yes, shape_a) : Tensor(),
            ctx.needs_grad(1) ? operand_grad(ctx.saved(0), Transpose::Yes, grad_y, Transpose::No, shape_b) : Tensor()};
  }
  // op(l) @ op(r), the gradient of an operand of `shape`. One the batch shared gets every product's,
  // summed: formed in fp32 (fp64 for fp64) and rounded once into its dtype, as one GEMM over the folded
  // batch would be (half products rounded one by one cancelled to 10% errors in bf16).
  static Tensor operand_grad(const Tensor& l, Transpose tl, const Tensor& r, Transpose tr, const Shape& shape) {
    const int64_t batch = std::max(l.dim() == 3 ? l.size(0) : 1, r.dim() == 3 ? r.size(0) : 1);
    const bool shared = batch > 1 && (shape.size() < 3 || shape[0] == 1);
    if (!shared) return gemm(l, tl, r, tr);
    const Tensor products = gemm(l, tl, r, tr, Tensor(), l.dtype() == DType::F64 ? DType::F64 : DType::F32);
    return reduce_keepdim(backend::ReduceKind::Sum, products, {0}, l.dtype()).reshape(shape);
  }
};
DEMI_REGISTER_OP(Matmul)

}  // namespace demi::ops

namespace demi {
namespace {

Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// a [..., M, K] @ b [..., K, N], both at least 2-D, inner extents checked.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul (batch dims)");
  if (shape_numel(batch_b) == 1) {  // b is one matrix: a's batch folds into M, one GEMM
    const Tensor y = ops::apply<ops::Matmul>(a.reshape({shape_numel(batch_a) * m, k}), b.reshape({k, n}));
    return y.reshape(with_matrix(batch, m, n));
  }
  const int64_t count = shape_numel(batch);
  auto as_batch = [&](const Tensor& t, const Shape& own) {
    const int64_t rows = t.size(-2), cols = t.size(-1);
    if (shape_numel(own) == 1 && count > 0) return t.reshape({1, rows, cols});  // shared: batch stride 0
    const Tensor full = shape_numel(own) == count ? t : expand(t, with_matrix(batch, rows, cols));
    return full.reshape({count, rows, cols});
  };
  return ops::apply<ops::Matmul>(as_batch(a, batch_a), as_batch(b, batch_b)).reshape(with_matrix(batch, m, n));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_floating("matmul", "first operand", a);
  ops::check_floating("matmul", "second operand", b);
  ops::check_same_device("matmul", a, b);
  DEMI_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got ", a.shape(), " @ ",
             b.shape(), "; multiply by a 0-d tensor with mul");
  // A vector is a matrix of one row (first operand) or one column (second), removed again after.
  const bool row = a.dim() == 1, column = b.dim() == 1;
  const Tensor a2 = row ? a.reshape({1, a.size(0)}) : a;
  const Tensor b2 = column ? b.reshape({b.size(0), 1}) : b;
  DEMI_CHECK(a2.size(-1) == b2.size(-2), "matmul: inner dimensions differ: ", a.shape(), " @ ", b.shape(), " (",
             a2.size(-1), " vs ", b2.size(-2), ")");
  const Tensor y = batched_matmul(a2, b2);
  Shape out = y.shape();
  if (column) out.erase(out.end() - 1);
  if (row) out.erase(out.end() - (column ? 1 : 2));
  return y.reshape(out);
}

}  // namespace demi

// embedding: rows of a weight matrix picked by int64 indices of any shape. The backward adds each
// position's gradient row into its row of grad_weight in ascending position (deterministic; fp32
// accumulation for half weights); padding_idx's row gets none, as in PyTorch.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct Embedding {
  static constexpr const char* kName = "embedding";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  struct Attrs {
    Shape weight_shape;
    int64_t padding_idx;  // -1: none
  };

  static Tensor forward(OpContext& ctx, const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
    Shape shape = indices.shape();
    shape.push_back(weight.size(1));
    Tensor y = empty(shape, weight.dtype(), weight.device());
    backend::EmbeddingArgs args;
    args.weight = weight.ref();
    args.indices = indices.ref();
    args.output = y.ref();
    kernels(weight).embedding_forward(args);
    ctx.save(indices);
    ctx.set_attrs(Attrs{weight.shape(), padding_idx});
    return y;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const Attrs& attrs = ctx.attrs<Attrs>();
    Tensor grad_weight = empty(attrs.weight_shape, grad_y.dtype(), grad_y.device());
    backend::EmbeddingArgs args;
    args.indices = ctx.saved(0).ref();
    args.grad_output = grad_y.ref();
    args.grad_weight = grad_weight.ref();
    args.padding_idx = attrs.padding_idx;
    kernels(grad_y).embedding_backward(args);
    return {grad_weight, Tensor()};
  }
};
DEMI_REGISTER_OP(Embedding)

}  // namespace demi::ops

namespace demi {
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  ops::check_floating("embedding", "weight", weight);
  ops::check_dim("embedding", "weight", weight, 2, "[num_embeddings, embedding_dim]");
  DEMI_CHECK(indices.defined(), "embedding: indices is an undefined tensor");
  DEMI_CHECK(indices.dtype() == DType::I64, "embedding: indices must be int64, got ", indices.dtype(),
             "; convert them with .to(DType::I64)");
  ops::check_same_device("embedding", weight, indices);
  const int64_t rows = weight.size(0);
  int64_t padding = -1;
  if (padding_idx) {
    DEMI_CHECK(*padding_idx >= -rows && *padding_idx < rows, "embedding: padding_idx ", *padding_idx,
               " is out of range for ", rows, " embeddings; it must be in [-", rows, ", ", rows, ")");
    padding = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  return ops::apply<ops::Embedding>(weight, indices, padding);
}
}  // namespace demi

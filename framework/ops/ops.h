// The functional API: free functions in namespace demi with PyTorch's names. Each is defined in
// the file of its op (framework/ops/<name>.cpp), recorded by autograd when an input requires grad.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "framework/tensor/generator.h"
#include "framework/tensor/tensor.h"

namespace demi {

// Element-wise arithmetic with numpy broadcasting; mixed floating dtypes promote (F16+F32 -> F32).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
// alpha * x + beta, the op behind tensor-scalar arithmetic.
Tensor affine(const Tensor& x, double alpha, double beta);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& x, double s);
Tensor operator+(double s, const Tensor& x);
Tensor operator-(const Tensor& x, double s);
Tensor operator-(double s, const Tensor& x);
Tensor operator*(const Tensor& x, double s);
Tensor operator*(double s, const Tensor& x);
Tensor operator/(const Tensor& x, double s);
Tensor operator/(double s, const Tensor& x);

// Comparisons, element-wise with broadcasting: a uint8 mask of 0 and 1 (PyTorch returns bool; demi
// has no bool dtype). A uint8 mask multiplies a floating tensor directly (x * (x > 0)) and sums to
// int64. Not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// torch.isfinite / isnan / isinf: a uint8 mask per element (an integer tensor's elements are all
// finite). Not differentiable.
Tensor isfinite(const Tensor& x);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // erf form, PyTorch's default approximate='none'
// min(max(x, min), max); at least one bound. The gradient passes where min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);

// Reductions over `dims` (negative counts from the end); all dims when `dims` is empty.
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
// Index (int64) of the first maximum along dim, or of the flattened tensor when dim is absent (a 0-d
// result). NaN counts as the maximum. Not differentiable.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// Layout. transpose swaps two dims into a new tensor (a copy: demi tensors are contiguous);
// select(x, 0, i) is row i of dim 0 as a view sharing x's storage (x[i]); cat joins tensors along
// dim (floating inputs promote to the widest).
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// torch.matmul: [..., M, K] @ [..., K, N] with the batch dims broadcast (numpy rules); a 1-D first
// operand [K] is taken as [1, K], a 1-D second [K] as [K, 1], and that dim is removed from the result
// (1-D @ 1-D is a 0-d dot product). A second operand without batch dims ([B, M, K] @ [K, N]) folds
// the batch into M: one GEMM.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x @ weight^T + bias: x [..., in], weight [out, in], bias [out] (optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// x [N, C, H, W], weight [O, C, KH, KW], bias [O] (optional); square stride and padding.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int stride = 1,
              int padding = 0);
// stride 0 means stride = kernel_size, as PyTorch's default.
Tensor max_pool2d(const Tensor& x, int kernel_size, int stride = 0, int padding = 0);
Tensor avg_pool2d(const Tensor& x, int kernel_size, int stride = 0, int padding = 0);
// Global pooling over H and W: [N, C, H, W] -> [N, C, 1, 1].
Tensor global_avg_pool2d(const Tensor& x);
Tensor global_max_pool2d(const Tensor& x);

struct BatchNormOptions {
  bool training = false;  // batch statistics (and running-stat update) vs running statistics
  double momentum = 0.1;
  double eps = 1e-5;
};
// x [N, C] or [N, C, H, W]; running stats, weight and bias [C] fp32 (each optional).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options);
// relu(batch_norm(...)), the same values bit for bit; in training on the CPU the ReLU runs inside
// the batch norm's kernels (one op, "batch_norm_relu"), saving two passes over the activations.
// nn::Sequential calls it for a BatchNorm2d followed by a ReLU.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, const BatchNormOptions& options);
// gelu(batch_norm(...)) the same way ("batch_norm_gelu"; fp32 and half inputs, else the two ops),
// which also spares the GELU's saved input. nn::Sequential calls it for a BatchNorm2d then a GELU.
Tensor batch_norm_gelu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, const BatchNormOptions& options);

// Over the last dimension (dim must be -1 or dim() - 1).
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

struct CrossEntropyOptions {
  double label_smoothing = 0.0;
};
// Mean cross-entropy of logits [N, K] against I64 class indices [N].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});

// torch.nn.functional.dropout: in training, each element is zeroed with probability p and the
// others scaled by 1 / (1 - p); x itself when p = 0, when not training or when x is empty. p outside
// [0, 1] is an error. The mask draws x.numel() numbers from `gen`, or from the default generator of
// x's device: demi's Philox stream, so a generator state gives the same mask on every device, but
// not PyTorch's mask.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// Rows of weight [num_embeddings, embedding_dim] picked by int64 indices of any shape: the result
// is indices.shape + [embedding_dim] (at::embedding's argument order, weight first). Row
// padding_idx (negative counts from the end) gets no gradient. An index outside
// [0, num_embeddings) is an error naming it and its position.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

// |x|: the sign bit cleared (|-0| = +0). The gradient is sign(x) * grad_y, 0 at x = 0, as PyTorch.
Tensor abs(const Tensor& x);

// The largest (smallest) element, a 0-d tensor; NaN when any element is NaN. The gradient is shared
// evenly among the elements equal to the result (among the NaNs when it is NaN), as PyTorch.
// Integer tensors are compared as float64 (exact below 2^53) and keep their dtype.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Along dim: the values and the int64 indices of the first maximum (minimum) of each slice, as
// libtorch's tuple (auto [values, indices] = max(x, 1)); NaN counts as the extreme. The gradient
// goes to the indexed element.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// The maximum (minimum) over dims (all when empty), as sum's dims. The gradient is shared evenly
// among the elements equal to their slice's result; a slice whose result is NaN gets NaN, as PyTorch.
Tensor amax(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
// argmax's twin: the first minimum; NaN counts as the minimum. Not differentiable.
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// cond ? a : b element-wise. cond is a uint8 mask (what comparisons return); cond, a and b broadcast
// together (numpy rules) and a, b promote as add's operands (a scalar takes the tensor's dtype). A
// select, not arithmetic: an inf or NaN in the branch not taken stays out. grad_a is grad_y where
// cond holds, else 0, summed to a's shape; grad_b the other way round.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` where mask (uint8) is 1: where(mask, value, x). mask and x broadcast together. The
// gradient is 0 where filled.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Layout (negative dims count from the end, as in PyTorch). permute reorders the dims (y.shape[i] =
// x.shape[dims[i]]) into a new tensor, a copy like transpose; unsqueeze inserts an extent-1 dim at
// dim and squeeze removes extent-1 dims (all, or dim if its extent is 1): views sharing x's storage;
// expand broadcasts x to shape (-1 keeps a dim's extent, new dims lead), a copy: demi tensors have no
// strides, so writes into the result do not reach x. expand's gradient is summed back to x's shape.
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);

// softmax(scale * query key^T + attn_mask) value, torch.nn.functional.scaled_dot_product_attention
// without dropout: query [..., L, E], key [..., S, E], value [..., S, Ev] with the same leading
// (batch, head) dims, at least one; the result is [..., L, Ev]. attn_mask broadcasts to [..., L, S]:
// uint8 (1: the key takes part, as torch's bool mask) or floating (added; it gets a gradient).
// is_causal: query i sees keys j <= i (upper-left aligned; not with attn_mask). scale defaults to
// 1 / sqrt(E). A query that sees no key gives 0 (torch's CPU result). Half inputs: fp32 products and
// softmax, one rounding of the output; the scores are never stored in half.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// torch.nn.functional.layer_norm: each slice of x over its last normalized_shape.size() dims (which
// must be normalized_shape) normalised to mean 0 and biased variance 1 (eps added to the variance),
// times weight plus bias (each optional, of shape normalized_shape, in x's dtype or, for a half x,
// float32). Mean and variance are fp32 (fp64 for an fp64 x); a half x gives a half result, rounded
// once. Runs in fp32 under autocast, as PyTorch's CUDA autocast (docs/amp.md).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace demi

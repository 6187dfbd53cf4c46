// layer_norm over the last dims of x, as torch.nn.functional.layer_norm: the kernel normalises each
// row (the last normalized_shape.size() dims, flattened) with fp32 statistics (fp64 for fp64),
// which the op saves with x for the backward kernel, which gives the gradients of x, weight and
// bias at once. weight and bias may be fp32 beside a half x (torch's mixed layer_norm): the
// result keeps x's dtype, their gradients theirs.
#include <algorithm>
#include <sstream>

#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {
namespace {

// weight and bias (after autocast's casts): x's dtype, or fp32 beside a half x, and one dtype.
void check_param_dtypes(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const std::pair<const char*, const Tensor*> params[] = {{"weight", &weight}, {"bias", &bias}};
  for (const auto& [name, t] : params) {
    if (!t->defined()) continue;
    DEMI_CHECK(t->dtype() == x.dtype() || (is_half(x.dtype()) && t->dtype() == DType::F32), "layer_norm: ", name,
               " is ", t->dtype(), " but input is ", x.dtype(), "; give it input's dtype",
               is_half(x.dtype()) ? " or float32" : "");
  }
  DEMI_CHECK(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(), "layer_norm: weight is ",
             weight.dtype(), " but bias is ", bias.dtype(), "; give them one dtype");
}

}  // namespace

struct LayerNorm {
  static constexpr const char* kName = "layer_norm";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  struct Attrs {
    int64_t rows, cols;  // x as [rows, cols]
    double eps;
    Shape param_shape;  // normalized_shape
    DType bias_dtype;   // of grad_bias (bias itself is not saved)
  };

  static Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Attrs attrs) {
    check_param_dtypes(x, weight, bias);
    const DType stats = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor y = empty_like(x);
    Tensor mean = empty({attrs.rows}, stats, x.device()), rstd = empty({attrs.rows}, stats, x.device());
    backend::LayerNormArgs args;
    args.input = x.ref();
    args.output = y.ref();
    if (weight.defined()) args.weight = weight.ref();
    if (bias.defined()) args.bias = bias.ref();
    args.mean = mean.ref();
    args.rstd = rstd.ref();
    args.cols = attrs.cols;
    args.eps = attrs.eps;
    kernels(x).layer_norm_forward(args);
    ctx.save(x);
    ctx.save(weight);
    ctx.save(mean);
    ctx.save(rstd);
    attrs.bias_dtype = bias.defined() ? bias.dtype() : x.dtype();
    ctx.set_attrs(std::move(attrs));
    return y;
  }

  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const Attrs& attrs = ctx.attrs<Attrs>();
    const Tensor& x = ctx.saved(0);
    const Tensor& weight = ctx.saved(1);
    backend::LayerNormArgs args;
    args.input = x.ref();
    args.grad_output = grad_y.ref();
    if (weight.defined()) args.weight = weight.ref();
    args.mean = ctx.saved(2).ref();
    args.rstd = ctx.saved(3).ref();
    args.cols = attrs.cols;
    args.eps = attrs.eps;
    TensorList grads(3);
    if (ctx.needs_grad(0)) {
      grads[0] = empty_like(x);
      args.grad_input = grads[0].ref();
    }
    if (ctx.needs_grad(1)) {
      grads[1] = empty_like(weight);
      args.grad_weight = grads[1].ref();
    }
    if (ctx.needs_grad(2)) {
      grads[2] = empty(attrs.param_shape, attrs.bias_dtype, x.device());
      args.grad_bias = grads[2].ref();
    }
    kernels(x).layer_norm_backward(args);
    return grads;
  }
};
DEMI_REGISTER_OP(LayerNorm)

}  // namespace demi::ops

namespace demi {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "layer_norm";
  ops::check_floating(op, "input", x);
  DEMI_CHECK(!normalized_shape.empty(), "layer_norm: normalized_shape must have at least one dimension, got []");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const Shape& s = x.shape();
  if (x.dim() < k || !std::equal(normalized_shape.begin(), normalized_shape.end(), s.end() - k)) {
    std::ostringstream expected;
    expected << "[*";
    for (int64_t d : normalized_shape) expected << ", " << d;
    expected << "]";
    DEMI_THROW("layer_norm: input ", s, " does not end in normalized_shape ", normalized_shape,
               "; expected an input of shape ", expected.str());
  }
  const std::pair<const char*, const Tensor*> params[] = {{"weight", &weight}, {"bias", &bias}};
  for (const auto& [name, t] : params) {
    if (!t->defined()) continue;
    ops::check_same_device(op, x, *t);
    DEMI_CHECK(t->shape() == normalized_shape, "layer_norm: ", name, " must have normalized_shape ",
               normalized_shape, ", got ", t->shape());
  }
  ops::LayerNorm::Attrs attrs;
  attrs.cols = shape_numel(normalized_shape);
  attrs.rows = shape_numel(Shape(s.begin(), s.end() - k));
  attrs.eps = eps;
  attrs.param_shape = normalized_shape;
  attrs.bias_dtype = x.dtype();
  return ops::apply<ops::LayerNorm>(x, weight, bias, attrs);
}

}  // namespace demi

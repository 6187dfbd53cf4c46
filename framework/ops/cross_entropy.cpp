// cross_entropy: fused log-softmax + mean negative log-likelihood with label smoothing, fp32 math
// in the kernel (fp64 for fp64 logits). Saves logits and targets; the loss is a 0-d tensor.
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct CrossEntropy {
  static constexpr const char* kName = "cross_entropy";
  static constexpr amp::Category kCast = amp::Category::Fp32;

  static Tensor forward(OpContext& ctx, const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
    Tensor loss = empty({}, logits.dtype() == DType::F64 ? DType::F64 : DType::F32, logits.device());
    backend::CrossEntropyArgs args;
    args.logits = logits.ref();
    args.target = target.ref();
    args.loss = loss.ref();
    args.label_smoothing = options.label_smoothing;
    kernels(logits).cross_entropy_forward(args);
    ctx.save(logits);
    ctx.save(target);
    ctx.set_attrs(options);
    return loss;
  }
  static TensorList backward(OpContext& ctx, const Tensor& grad_loss) {
    const Tensor& logits = ctx.saved(0);
    Tensor grad_logits = empty_like(logits);
    backend::CrossEntropyArgs args;
    args.logits = logits.ref();
    args.target = ctx.saved(1).ref();
    args.grad_loss = grad_loss.ref();
    args.grad_logits = grad_logits.ref();
    args.label_smoothing = ctx.attrs<CrossEntropyOptions>().label_smoothing;
    kernels(logits).cross_entropy_backward(args);
    return {grad_logits, Tensor()};
  }
};
DEMI_REGISTER_OP(CrossEntropy)

}  // namespace demi::ops

namespace demi {
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  ops::check_floating("cross_entropy", "logits", logits);
  // PyTorch's K-dimensional form (logits [N, C, d1, ...], target [N, d1, ...]) and its
  // class-probability targets are not here: say so rather than only that the shape is wrong.
  DEMI_CHECK(logits.dim() <= 2, "cross_entropy: logits must be [N, num_classes], got shape ", logits.shape(),
             "; per-position losses (logits [N, C, d1, ...]) are not supported: move the classes last and "
             "flatten, logits to [N * d1 * ..., C] and target to [N * d1 * ...]");
  ops::check_dim("cross_entropy", "logits", logits, 2, "[N, num_classes]");
  ops::check_same_device("cross_entropy", logits, target);
  DEMI_CHECK(!(is_floating(target.dtype()) && target.shape() == logits.shape()),
             "cross_entropy: class-probability targets (a floating target shaped like the logits, ", target.shape(),
             ") are not supported; pass int64 class indices [", logits.size(0), "]");
  DEMI_CHECK(target.dtype() == DType::I64, "cross_entropy: target must hold int64 class indices, got ",
             target.dtype(), "; convert labels with .to(DType::I64)");
  DEMI_CHECK(target.shape() == Shape{logits.size(0)}, "cross_entropy: target must be [", logits.size(0),
             "] for logits ", logits.shape(), ", got ", target.shape());
  DEMI_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  return ops::apply<ops::CrossEntropy>(logits, target, options);
}
}  // namespace demi

// batch_norm over channel dim 1 of [N, C] or [N, C, H, W]. Statistics and affine parameters are
// fp32 (float64 for float64 input) whatever the input dtype; the output has the input's dtype.
// Training: batch statistics, running stats updated in place (not again when a checkpoint reruns
// the forward in backward), fused backward kernel. Eval: running statistics; its backward is built
// from ops (an affine map per channel). batch_norm_relu and batch_norm_gelu are relu(batch_norm(...))
// and gelu(batch_norm(...)) with the activation inside the batch norm's kernels where the device has
// them (training on the CPU): bit for bit the same values, without the activation's passes over
// memory, and without the activation's saved input. A channels_last input runs NHWC kernels where
// the device has them (batch_norm alone), else a contiguous copy.
#include "framework/autograd/checkpoint.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::ops {

template <backend::BatchNormActivation kAct>
struct BatchNormOp {
  static constexpr const char* kName = kAct == backend::BatchNormActivation::Relu   ? "batch_norm_relu"
                                       : kAct == backend::BatchNormActivation::Gelu ? "batch_norm_gelu"
                                                                                    : "batch_norm";
  static constexpr amp::Category kCast = amp::Category::Unchanged;
  static constexpr bool kKeepsMemoryFormat = true;

  static Tensor forward(OpContext& ctx, const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& weight, const Tensor& bias, const BatchNormOptions& options) {
    const DType stat_dtype = x_in.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const bool nhwc = kAct == backend::BatchNormActivation::None && runs_channels_last(x_in);
    const Tensor x = in_kernel_format(x_in, nhwc);
    const int64_t channels = x.size(1);
    Tensor y = empty_like(x);
    backend::BatchNormArgs args;
    args.mode = options.training ? backend::BatchNormMode::Train : backend::BatchNormMode::Eval;
    args.channels_last = nhwc;
    args.input = kernel_ref(x, nhwc);
    args.output = kernel_ref(y, nhwc);
    if (weight.defined()) args.weight = weight.ref();
    if (bias.defined()) args.bias = bias.ref();
    // A checkpoint's rerun in backward normalises again but must not move the statistics again.
    const bool update_stats = !(options.training && autograd::is_recomputing());
    if (running_mean.defined() && update_stats) args.running_mean = running_mean.ref();
    if (running_var.defined() && update_stats) args.running_var = running_var.ref();
    args.momentum = options.momentum;
    args.eps = options.eps;
    Tensor save_mean, save_invstd, activation_coef;
    if constexpr (kAct != backend::BatchNormActivation::None) {  // the caller checked: training, a device with the kernels
      activation_coef = empty({4, channels}, stat_dtype, x.device());
      args.activation = kAct;
      args.activation_coef = activation_coef.ref();
    }
    if (options.training) {
      save_mean = empty({channels}, stat_dtype, x.device());
      save_invstd = empty({channels}, stat_dtype, x.device());
      args.save_mean = save_mean.ref();
      args.save_invstd = save_invstd.ref();
    } else if (ctx.recording()) {
      // Backward needs the statistics used now, not the running buffers as they will be then.
      save_mean = running_mean.clone();
      save_invstd = pow(running_var + options.eps, -0.5);
    }
    kernels(x).batch_norm_forward(args);
    ctx.save(x);
    ctx.save(weight);
    ctx.save(save_mean);
    ctx.save(save_invstd);
    ctx.save(activation_coef);
    ctx.set_attrs(std::make_pair(options, nhwc));
    return y;
  }

  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const Tensor& x = ctx.saved(0);
    const Tensor& weight = ctx.saved(1);
    const Tensor& mean = ctx.saved(2);
    const Tensor& invstd = ctx.saved(3);
    TensorList grads(5);
    const auto& [options, nhwc] = ctx.attrs<std::pair<BatchNormOptions, bool>>();
    if (options.training) {
      // x is in the kernels' format, and so is grad_y (the output's, which is x's).
      backend::BatchNormArgs args;
      args.channels_last = nhwc;
      if constexpr (kAct != backend::BatchNormActivation::None) {
        args.activation = kAct;
        args.activation_coef = ctx.saved(4).ref();
      }
      args.input = kernel_ref(x, nhwc);
      args.grad_output = kernel_ref(grad_y, nhwc);
      if (weight.defined()) args.weight = weight.ref();
      args.save_mean = mean.ref();
      args.save_invstd = invstd.ref();
      if (ctx.needs_grad(0)) {
        grads[0] = empty_like(x);
        args.grad_input = kernel_ref(grads[0], nhwc);
      }
      if (ctx.needs_grad(3)) {
        grads[3] = empty_like(weight);
        args.grad_weight = grads[3].ref();
      }
      if (ctx.needs_grad(4)) {
        grads[4] = empty_like(mean);
        args.grad_bias = grads[4].ref();
      }
      kernels(x).batch_norm_backward(args);
      return grads;
    }
    // Eval: y = (x - mean) * invstd * weight + bias, per channel.
    Shape channel_shape(static_cast<size_t>(x.dim()), 1);
    channel_shape[1] = x.size(1);
    std::vector<int64_t> other_dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) other_dims.push_back(d);
    const Tensor g = grad_y.to(mean.dtype());
    const Tensor scale = weight.defined() ? invstd * weight : invstd;
    if (ctx.needs_grad(0)) grads[0] = (g * scale.reshape(channel_shape)).to(x.dtype());
    if (ctx.needs_grad(3)) {
      const Tensor xhat = (x.to(mean.dtype()) - mean.reshape(channel_shape)) * invstd.reshape(channel_shape);
      grads[3] = sum(g * xhat, other_dims);
    }
    if (ctx.needs_grad(4)) grads[4] = sum(g, other_dims);
    return grads;
  }
};
using BatchNorm = BatchNormOp<backend::BatchNormActivation::None>;
using BatchNormRelu = BatchNormOp<backend::BatchNormActivation::Relu>;
using BatchNormGelu = BatchNormOp<backend::BatchNormActivation::Gelu>;
DEMI_REGISTER_OP(BatchNorm)
DEMI_REGISTER_OP(BatchNormRelu)
DEMI_REGISTER_OP(BatchNormGelu)

}  // namespace demi::ops

namespace demi {
namespace {

void check_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                      const Tensor& bias, const BatchNormOptions& options) {
  const char* op = "batch_norm";
  ops::check_floating(op, "input", x);
  DEMI_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm: input must be [N, C] or [N, C, H, W], got ", x.shape());
  const DType stat_dtype = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t channels = x.size(1);
  const std::pair<const char*, const Tensor*> params[] = {
      {"running_mean", &running_mean}, {"running_var", &running_var}, {"weight", &weight}, {"bias", &bias}};
  for (const auto& [name, t] : params) {
    if (!t->defined()) continue;
    ops::check_same_device(op, x, *t);
    DEMI_CHECK(t->shape() == Shape{channels}, "batch_norm: ", name, " must be [", channels, "] for input ",
               x.shape(), ", got ", t->shape());
    DEMI_CHECK(t->dtype() == stat_dtype, "batch_norm: ", name, " must be ", stat_dtype, " (statistics and affine "
               "parameters stay fp32 for half inputs), got ", t->dtype(), "; keep BatchNorm parameters in fp32");
  }
  DEMI_CHECK(options.training || (running_mean.defined() && running_var.defined()),
             "batch_norm: eval mode needs running_mean and running_var; pass them or use training=true");
  if (options.training) {  // one value has no variance; none at all is the empty case below (PyTorch's)
    const int64_t per_channel = x.size(0) * (x.dim() == 4 ? x.size(2) * x.size(3) : 1);
    DEMI_CHECK(per_channel != 1, "batch_norm: training needs more than one value per channel, got input of shape ",
               x.shape(), "; use a larger batch or eval mode");
  }
}

// An input without elements (N, H or W of 0), as PyTorch answers it: an empty output that still
// depends on weight and bias (so they get zero gradients), and running statistics left alone.
Tensor empty_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Shape channel_shape = x.dim() == 4 ? Shape{1, x.size(1), 1, 1} : Shape{1, x.size(1)};
  Tensor out = x * 1.0;
  if (weight.defined()) out = out * weight.to(x.dtype()).reshape(channel_shape);
  if (bias.defined()) out = out + bias.to(x.dtype()).reshape(channel_shape);
  return out;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, const BatchNormOptions& options) {
  check_batch_norm(x, running_mean, running_var, weight, bias, options);
  if (x.numel() == 0) return empty_batch_norm(x, weight, bias);
  return ops::apply<ops::BatchNorm>(x, running_mean, running_var, weight, bias, options);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, const BatchNormOptions& options) {
  check_batch_norm(x, running_mean, running_var, weight, bias, options);
  if (x.numel() == 0) return empty_batch_norm(x, weight, bias);
  if (!options.training || !kernels(x).supports(backend::KernelFamily::BatchNormRelu)) {
    return relu(ops::apply<ops::BatchNorm>(x, running_mean, running_var, weight, bias, options));
  }
  return ops::apply<ops::BatchNormRelu>(x, running_mean, running_var, weight, bias, options);
}

Tensor batch_norm_gelu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, const BatchNormOptions& options) {
  check_batch_norm(x, running_mean, running_var, weight, bias, options);
  if (x.numel() == 0) return gelu(empty_batch_norm(x, weight, bias));
  if (!options.training || x.dtype() == DType::F64 || !kernels(x).supports(backend::KernelFamily::BatchNormGelu)) {
    return gelu(ops::apply<ops::BatchNorm>(x, running_mean, running_var, weight, bias, options));
  }
  return ops::apply<ops::BatchNormGelu>(x, running_mean, running_var, weight, bias, options);
}

}  // namespace demi

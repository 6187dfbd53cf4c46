// SyncBatchNorm from recorded ops and one differentiable all-reduce: the statistics are sums over
// every rank's examples, so autograd's backward through them is the global batch's backward.
#include "framework/dist/sync_batch_norm.h"

#include "framework/autograd/checkpoint.h"
#include "framework/ops/op.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::dist {

namespace {

struct AllReduceSum {
  static constexpr const char* kName = "all_reduce";
  static constexpr amp::Category kCast = amp::Category::Unchanged;

  static Tensor forward(autograd::OpContext& ctx, const Tensor& x, ProcessGroup* group) {
    Tensor y = x.clone();
    group->all_reduce(y, ReduceOp::Sum);
    ctx.set_attrs(group);
    return y;
  }
  // y_r = sum_s x_s on every rank r, so dL/dx_s = sum_r dL/dy_r: the gradients all-reduced.
  static TensorList backward(autograd::OpContext& ctx, const Tensor& grad_y) {
    Tensor grad_x = grad_y.clone();
    ctx.attrs<ProcessGroup*>()->all_reduce(grad_x, ReduceOp::Sum);
    return {grad_x};
  }
};

}  // namespace

Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group) { return ops::apply<AllReduceSum>(x, &group); }

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm2d& source, std::shared_ptr<ProcessGroup> group)
    : nn::BatchNorm2d(source.options()), group_(std::move(group)) {
  DEMI_CHECK(group_ != nullptr, "SyncBatchNorm: the process group is null");
  weight = source.weight;
  bias = source.bias;
  running_mean = source.running_mean;
  running_var = source.running_var;
  num_batches_tracked = source.num_batches_tracked;
  train(source.is_training());
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  if (!is_training() || group_->size() == 1) return nn::BatchNorm2d::forward(x);
  DEMI_CHECK(x.dim() == 4, "SyncBatchNorm: input must be [N, C, H, W], got ", x.shape());
  const int64_t channels = x.size(1);
  DEMI_CHECK(channels == options().num_features, "SyncBatchNorm: expected ", options().num_features,
             " channels, got input ", x.shape());
  const bool update_stats = !autograd::is_recomputing();  // a checkpoint's rerun: the first run did it
  if (num_batches_tracked.defined() && update_stats) {
    num_batches_tracked.add_(1.0);  // on the device: no read back to the host
  }
  // Statistics in fp32 whatever the input dtype, as batch_norm; [sum x, sum x^2, count] per channel.
  const Tensor xf = x.to(x.dtype() == DType::F64 ? DType::F64 : DType::F32);
  const Tensor local_sum = sum(xf, {0, 2, 3});
  const Tensor local_sumsq = sum(xf * xf, {0, 2, 3});
  const Tensor global_sum = all_reduce_sum(local_sum, *group_);
  const Tensor global_sumsq = all_reduce_sum(local_sumsq, *group_);
  const Tensor count_t = full({1}, static_cast<double>(x.numel() / channels), xf.dtype(), x.device());
  group_->all_reduce(count_t, ReduceOp::Sum);  // ranks may hold different batch sizes
  const double count = count_t.item<double>();
  DEMI_CHECK(count > 1, "SyncBatchNorm: training needs more than one value per channel over all ranks, got ", count);
  const Tensor mean = global_sum / count;
  const Tensor var = relu(global_sumsq / count - mean * mean);  // >= 0 despite rounding
  const Tensor invstd = pow(var + options().eps, -0.5);
  if (running_mean.defined() && update_stats) {
    NoGradGuard no_grad;
    const double m = options().momentum;
    const Tensor new_mean = running_mean * (1.0 - m) + mean.detach() * m;
    const Tensor new_var = running_var * (1.0 - m) + var.detach() * (m * count / (count - 1.0));
    running_mean.copy_(new_mean);
    running_var.copy_(new_var);
  }
  const Shape per_channel{1, channels, 1, 1};
  Tensor scale = invstd, shift = mean * invstd * -1.0;
  if (weight.defined()) {
    scale = scale * weight;
    shift = shift * weight + bias;
  }
  return (xf * scale.reshape(per_channel) + shift.reshape(per_channel)).to(x.dtype());
}

std::shared_ptr<nn::Module> convert_sync_batch_norm(std::shared_ptr<nn::Module> module,
                                                    std::shared_ptr<ProcessGroup> group) {
  DEMI_CHECK(module != nullptr, "convert_sync_batch_norm: the module is null");
  if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(module.get()); bn && !dynamic_cast<SyncBatchNorm*>(bn)) {
    return std::make_shared<SyncBatchNorm>(*bn, group);
  }
  for (const auto& [name, child] : module->named_children()) {
    const std::shared_ptr<nn::Module> converted = convert_sync_batch_norm(child, group);
    if (converted != child) module->replace_child(name, converted);
  }
  return module;
}

}  // namespace demi::dist

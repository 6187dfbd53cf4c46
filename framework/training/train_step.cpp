// TrainStep::run: the order of the AMP step, in one place.
#include "framework/training/train_step.h"

#include <cmath>
#include <optional>

#include "framework/amp/autocast.h"
#include "framework/autograd/profiler.h"
#include "framework/dist/distributed_data_parallel.h"
#include "framework/tensor/factories.h"
#include "framework/ops/ops.h"

namespace demi::training {

TrainStep::TrainStep(optim::Optimizer& optimizer, amp::GradScaler& scaler, const Options& options,
                     optim::LRScheduler* scheduler)
    : optimizer_(optimizer), scaler_(scaler), options_(options), scheduler_(scheduler) {
  DEMI_CHECK(options.dtype == DType::F16 || options.dtype == DType::BF16 || options.dtype == DType::F32,
             "TrainStep: dtype must be float16, bfloat16 or float32, got ", options.dtype);
  DEMI_CHECK(options.micro_batches >= 1, "TrainStep: micro_batches must be >= 1, got ", options.micro_batches);
  DEMI_CHECK(options.clip_grad_norm >= 0.0, "TrainStep: clip_grad_norm must be >= 0, got ", options.clip_grad_norm);
}

bool TrainStep::any_rank(bool flag, const Device& device) {
  const Tensor t = full({}, flag ? 1.0 : 0.0, DType::F32, device);
  options_.ddp->process_group().all_reduce(t, dist::ReduceOp::Max);
  return t.item<float>() != 0.0f;
}

TrainStep::Result TrainStep::run(const std::function<Tensor(int)>& loss_fn) {
  Result result;
  {
    // Regions: the optimizer's kernels are no ops, so a profile would not show them otherwise.
    profiler::Region region("zero_grad");
    optimizer_.zero_grad();
  }
  for (int i = 0; i < options_.micro_batches; ++i) {
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> autocast;
      if (options_.dtype != DType::F32) autocast.emplace(options_.device, options_.dtype);
      loss = loss_fn(i);
    }
    DEMI_CHECK(loss.defined() && loss.numel() == 1, "TrainStep: loss_fn must return a one-element loss");
    const double value = loss.item<double>();
    result.loss += value / options_.micro_batches;
    bool non_finite = !std::isfinite(value);
    if (options_.ddp && !scaler_.is_enabled()) non_finite = any_rank(non_finite, loss.device());  // all skip, or none
    if (non_finite) {
      result.non_finite_loss = true;
      if (!scaler_.is_enabled()) {  // nothing would catch its gradients: do not take this step
        if (scheduler_) scheduler_->step(optim::StepOutcome::Skipped);
        return result;
      }
    }
    // Backward outside autocast: its ops run in the dtypes the forward saved. Data parallel: only
    // the last micro-batch's backward synchronises (the sum of all of them).
    std::optional<dist::DistributedDataParallel::NoSync> no_sync;
    if (options_.ddp && i + 1 < options_.micro_batches) no_sync.emplace(*options_.ddp);
    scaler_.scale(options_.micro_batches > 1 ? loss / static_cast<double>(options_.micro_batches) : loss).backward();
  }
  if (probe_) probe_();
  if (options_.clip_grad_norm > 0.0) {
    profiler::Region region("clip_grad_norm");
    result.grad_norm = scaler_.clip_grad_norm_(optimizer_, options_.clip_grad_norm).item<double>();
  }
  {
    profiler::Region region("optimizer step");  // with the scaler's unscale_ and update
    result.stepped = scaler_.step(optimizer_);
    scaler_.update();
  }
  if (scheduler_) scheduler_->step(result.stepped ? optim::StepOutcome::Taken : optim::StepOutcome::Skipped);
  return result;
}

}  // namespace demi::training

// TrainStep::run: the order of the AMP step, in one place.
#include "framework/training/train_step.h"

#include <optional>

#include "framework/amp/autocast.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/profiler.h"
#include "framework/dist/distributed_data_parallel.h"
#include "framework/tensor/factories.h"
#include "framework/ops/ops.h"

namespace demi::training {

namespace {
// 1 where x is inf or NaN, else 0, as float32 on x's device.
Tensor non_finite(const Tensor& x) { return eq(isfinite(x), 0.0).to(DType::F32); }
}  // namespace

TrainStep::TrainStep(optim::Optimizer& optimizer, amp::GradScaler& scaler, const Options& options,
                     optim::LRScheduler* scheduler)
    : optimizer_(optimizer), scaler_(scaler), options_(options), scheduler_(scheduler) {
  DEMI_CHECK(options.dtype == DType::F16 || options.dtype == DType::BF16 || options.dtype == DType::F32,
             "TrainStep: dtype must be float16, bfloat16 or float32, got ", options.dtype);
  DEMI_CHECK(options.micro_batches >= 1, "TrainStep: micro_batches must be >= 1, got ", options.micro_batches);
  DEMI_CHECK(options.clip_grad_norm >= 0.0, "TrainStep: clip_grad_norm must be >= 0, got ", options.clip_grad_norm);
}

void TrainStep::any_rank(const Tensor& flag) {
  options_.ddp->process_group().all_reduce(flag, dist::ReduceOp::Max);
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
    {
      NoGradGuard no_grad;  // the bookkeeping stays on the device, out of the graph
      const Tensor value = loss.detach().to(DType::F32).reshape({}) / static_cast<double>(options_.micro_batches);
      result.loss = result.loss.defined() ? result.loss + value : value;
      const Tensor bad = non_finite(loss.detach());
      result.non_finite_loss = result.non_finite_loss.defined() ? result.non_finite_loss + bad : bad;
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
    result.grad_norm = scaler_.clip_grad_norm_(optimizer_, options_.clip_grad_norm);
  }
  {
    profiler::Region region("optimizer step");  // with the scaler's unscale_ and update
    if (scaler_.is_enabled()) {
      // inf/NaN gradients (a non-finite loss gives them) make the scaler skip, on every rank.
      scaler_.step(optimizer_);
      scaler_.update();
      result.skipped = scaler_.last_found_inf();
    } else {
      // Nothing else would catch a non-finite loss: skip on it, on every rank or on none.
      result.skipped = result.non_finite_loss.clone();
      if (options_.ddp) any_rank(result.skipped);
      optimizer_.step_unless(result.skipped);
    }
  }
  if (scheduler_) scheduler_->step();
  return result;
}

}  // namespace demi::training

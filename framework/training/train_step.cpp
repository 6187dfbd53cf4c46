// TrainStep::run: the order of the AMP step, in one place, and its capture as a CUDA graph (cuda_graph).
#include "framework/training/train_step.h"

#include <optional>

#include "framework/amp/autocast.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/profiler.h"
#include "framework/core/warning.h"
#include "framework/cuda/graph.h"
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
  if (options.cuda_graph) {
    DEMI_CHECK(options.device == Device::Kind::CUDA, "TrainStep: cuda_graph records CUDA kernels, but the step runs "
               "on ", options.device, "; turn cuda_graph off there");
    DEMI_CHECK(!options.ddp, "TrainStep: cuda_graph with data parallel is not supported yet (the gradient all-reduce "
               "is not captured); turn one of them off");
    DEMI_CHECK(options.graph_warmup_steps >= 1, "TrainStep: graph_warmup_steps must be >= 1 (the first step makes "
               "the optimizer's state), got ", options.graph_warmup_steps);
    optimizer.set_capturable(true);  // throws for an optimizer that computes its step on the host
  }
}

TrainStep::~TrainStep() = default;

bool TrainStep::captured() const { return graph_ && graph_->has_graph(); }

void TrainStep::any_rank(const Tensor& flag) {
  options_.ddp->process_group().all_reduce(flag, dist::ReduceOp::Max);
}

TrainStep::Result TrainStep::run(const std::function<Tensor(int)>& loss_fn) {
  DEMI_CHECK(!options_.cuda_graph, "TrainStep: with cuda_graph, call run(inputs, loss_fn) so that a replay can copy "
             "each batch into the captured step's inputs");
  Result result = step(loss_fn);
  if (scheduler_) scheduler_->step();
  return result;
}

TrainStep::Result TrainStep::run(const std::vector<Tensor>& inputs, const BatchLossFn& loss_fn) {
  Result result;
  if (!options_.cuda_graph || probing() || (captured() && !fits_capture(inputs))) {
    result = step([&](int i) { return loss_fn(i, inputs); });
  } else if (captured() && frozen_constants() == captured_constants_) {
    result = replay(inputs);
  } else if (captured()) {  // a hyperparameter the capture froze has changed: record the step again
    if (captures_ == 2) {
      warn("TrainStep: the optimizer's momentum, betas or weight decay (or the scaler's factors) keep changing, so "
           "the CUDA graph is captured again each time; a schedule that cycles momentum (OneCycle's default) "
           "defeats cuda_graph: use OneCycle::Momentum{false} or turn cuda_graph off");
    }
    graph_.reset();
    result = capture(inputs, loss_fn);
  } else if (eager_steps_ < options_.graph_warmup_steps) {
    result = step([&](int i) { return loss_fn(i, inputs); });
    ++eager_steps_;
  } else {
    result = capture(inputs, loss_fn);
  }
  if (scheduler_) scheduler_->step();
  return result;
}

bool TrainStep::fits_capture(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != static_inputs_.size()) return false;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& a = inputs[k];
    const Tensor& b = static_inputs_[k];
    if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.device() != b.device() ||
        a.suggest_memory_format() != b.suggest_memory_format()) {
      return false;
    }
  }
  return true;
}

namespace {
// The step's results in tensors of their own: a replay overwrites the captured ones, and callers
// keep results over several steps (reading them at a logging step).
TrainStep::Result own_copy(const TrainStep::Result& r) {
  auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : t; };
  return {copy(r.loss), copy(r.skipped), copy(r.non_finite_loss), copy(r.grad_norm)};
}
}  // namespace

// Records one step on copies of `inputs` (filled with this batch), then replays it: the capture
// itself runs nothing. Parameters hold the recorded gradients afterwards, as after an eager step.
TrainStep::Result TrainStep::capture(const std::vector<Tensor>& inputs, const BatchLossFn& loss_fn) {
  const std::vector<Tensor> params = optimizer_.parameters();
  DEMI_CHECK(!params.empty(), "TrainStep: the optimizer has no parameters to capture a step for");
  static_inputs_.clear();
  for (const Tensor& x : inputs) static_inputs_.push_back(x.detach().clone());
  optimizer_.sync_device_lr();
  graph_ = std::make_unique<cuda::CUDAGraph>();
  try {
    graph_->capture_begin(params.front().device());
    static_result_ = step([&](int i) { return loss_fn(i, static_inputs_); });
    graph_->capture_end();
  } catch (...) {
    graph_.reset();  // ends the capture and gives its memory back
    static_inputs_.clear();
    static_result_ = Result();
    throw;
  }
  captured_grads_.clear();
  for (const Tensor& p : params) captured_grads_.emplace_back(p, p.grad());
  captured_constants_ = frozen_constants();
  ++captures_;
  graph_->replay();
  ++replays_;
  return own_copy(static_result_);
}

std::vector<double> TrainStep::frozen_constants() const {
  std::vector<double> out = optimizer_.step_constants();
  const amp::GradScaler::Options& s = scaler_.options();
  out.insert(out.end(), {s.growth_factor, s.backoff_factor, static_cast<double>(s.growth_interval),
                         s.min_scale.value_or(-1.0), s.max_scale.value_or(-1.0)});
  return out;
}

TrainStep::Result TrainStep::replay(const std::vector<Tensor>& inputs) {
  for (size_t k = 0; k < inputs.size(); ++k) static_inputs_[k].copy_(inputs[k]);
  optimizer_.sync_device_lr();  // the rate the scheduler set after the last step
  graph_->replay();
  ++replays_;
  // An eager step since the capture (a partial batch) left its own gradients on the parameters.
  for (const auto& [param, grad] : captured_grads_) param.set_grad(grad);
  return own_copy(static_result_);
}

TrainStep::Result TrainStep::step(const std::function<Tensor(int)>& loss_fn) {
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
  return result;
}

}  // namespace demi::training

// training::TrainStep: the one correct mixed-precision step, written once so nobody reorders it:
// zero_grad; per micro-batch, forward + loss under autocast and the scaled backward outside it;
// unscale_; optional clipping of the true gradients; step (skipped on inf/NaN); update; scheduler.
// A non-finite loss never reaches the weights: with the scaler its inf/NaN gradients make the
// scaler skip the step (and count it); without one (fp32, bf16) the optimizer skips it here.
// run() makes no host read (demi::host_reads()): every decision (skip, clip) is made on the
// device and the results stay there until the caller reads them, at its logging steps.
// It sits above amp/, optim/ and dist/ (it drives all three), so that none of them depends on another.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "framework/amp/grad_scaler.h"
#include "framework/core/device.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/optimizer.h"

namespace demi::dist {
class DistributedDataParallel;
}
namespace demi::cuda {
class CUDAGraph;
}

namespace demi::training {

class TrainStep {
 public:
  struct Options {
    Device::Kind device = Device::Kind::CPU;  // where autocast applies
    DType dtype = DType::F16;                 // F16 or BF16; F32 runs without autocast
    double clip_grad_norm = 0.0;              // max global L2 norm of the true gradients; 0: no clipping
    int micro_batches = 1;                    // gradient accumulation: losses are averaged over these
    // Data parallel: the model's DDP wrapper. Gradients are synchronised only after the last
    // micro-batch, and a non-finite loss on any rank skips the step on every rank.
    dist::DistributedDataParallel* ddp = nullptr;
    // CUDA graphs (with run(inputs, loss_fn)): after graph_warmup_steps eager steps the whole step
    // (forward, backward, unscale, clipping, optimizer, scale update) is captured once and every
    // later batch of the same shapes, dtypes and formats replays it: its inputs are copied into
    // the captured ones, and the scheduler still runs on the host (the optimizer reads its rate
    // from the device: Optimizer::set_capturable). Other batches (the last, partial one) and
    // steps the gradient probe is armed for run eagerly. Results are bit-identical to eager steps.
    // Needs a CUDA device, SGD or AdamW with nearest rounding, no data parallel, no dropout.
    bool cuda_graph = false;
    int graph_warmup_steps = 3;  // eager steps before the capture: optimizer state, library plans
  };
  // 0-d float32 tensors on the device. The reading methods are host reads: call them at logging
  // steps only, or a GPU waits for the step's kernels each time.
  struct Result {
    Tensor loss;             // mean loss over the micro-batches (unscaled)
    Tensor skipped;          // nonzero when the update was skipped (inf/NaN gradients or loss)
    Tensor non_finite_loss;  // how many micro-batches had an inf/NaN loss (poisoned data, divergence)
    Tensor grad_norm;        // before clipping; undefined when not clipping

    double loss_value() const { return loss.item<double>(); }
    bool stepped() const { return skipped.item<float>() == 0.0f; }
    bool had_non_finite_loss() const { return non_finite_loss.item<float>() != 0.0f; }
    double grad_norm_value() const { return grad_norm.defined() ? grad_norm.item<double>() : 0.0; }
  };

  // scheduler (optional) is stepped once per run(): iterations drive the schedule, skipped or not
  // (GradScaler::steps_skipped() counts the skips).
  TrainStep(optim::Optimizer& optimizer, amp::GradScaler& scaler, const Options& options,
            optim::LRScheduler* scheduler = nullptr);
  ~TrainStep();
  // loss_fn(i) runs the forward pass of micro-batch i and returns its loss.
  Result run(const std::function<Tensor(int micro_batch)>& loss_fn);
  // The same, with the step's input tensors (images, labels) passed through: loss_fn(i, inputs)
  // must read the batch from `inputs` only, as a captured step (cuda_graph) replays on copies.
  using BatchLossFn = std::function<Tensor(int micro_batch, const std::vector<Tensor>& inputs)>;
  Result run(const std::vector<Tensor>& inputs, const BatchLossFn& loss_fn);
  // Called after the backward passes, before unscaling: the gradients are still the scaled
  // values that went through half precision (what an underflow diagnostic must look at). With
  // cuda_graph, `armed` says which steps the probe wants (those run eagerly); none: every step.
  void set_gradient_probe(std::function<void()> probe, std::function<bool()> armed = nullptr) {
    probe_ = std::move(probe);
    probe_armed_ = std::move(armed);
  }
  // Whether a captured step exists (cuda_graph) and how many steps replayed it.
  bool captured() const;
  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }

 private:
  Result step(const std::function<Tensor(int)>& loss_fn);  // everything but the scheduler
  void any_rank(const Tensor& flag);  // max of a 0-d flag over the ranks of options_.ddp's group, in place
  bool probing() const { return probe_ && (!probe_armed_ || probe_armed_()); }
  bool fits_capture(const std::vector<Tensor>& inputs) const;  // same shapes, dtypes, formats
  Result capture(const std::vector<Tensor>& inputs, const BatchLossFn& loss_fn);
  Result replay(const std::vector<Tensor>& inputs);
  // What a capture freezes besides the memory it uses: the optimizer's step constants and the
  // scaler's update factors. A replay whose constants differ captures again.
  std::vector<double> frozen_constants() const;

  optim::Optimizer& optimizer_;
  amp::GradScaler& scaler_;
  Options options_;
  optim::LRScheduler* scheduler_;
  std::function<void()> probe_;
  std::function<bool()> probe_armed_;
  // cuda_graph: the recording, its inputs and results, and each parameter's gradient after it.
  std::unique_ptr<cuda::CUDAGraph> graph_;
  std::vector<Tensor> static_inputs_;
  Result static_result_;
  std::vector<std::pair<Tensor, Tensor>> captured_grads_;
  std::vector<double> captured_constants_;
  int64_t eager_steps_ = 0, replays_ = 0, captures_ = 0;
};

}  // namespace demi::training

namespace demi::amp {
// Its former name (it lived in framework/amp until amp stopped depending on dist).
using TrainStep [[deprecated("use demi::training::TrainStep (framework/training/train_step.h)")]] =
    training::TrainStep;
}  // namespace demi::amp

// training::TrainStep: the one correct mixed-precision step, written once so nobody reorders it:
// zero_grad; per micro-batch, forward + loss under autocast and the scaled backward outside it;
// unscale_; optional clipping of the true gradients; step (skipped on inf/NaN); update; scheduler.
// A non-finite loss never reaches the weights: with the scaler its inf/NaN gradients make the
// scaler skip the step (and count it); without one (fp32, bf16) the step is skipped here.
// It sits above amp/, optim/ and dist/ (it drives all three), so that none of them depends on another.
#pragma once

#include <functional>

#include "framework/amp/grad_scaler.h"
#include "framework/core/device.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/optimizer.h"

namespace demi::dist {
class DistributedDataParallel;
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
  };
  struct Result {
    double loss = 0.0;       // mean loss over the micro-batches (unscaled)
    bool stepped = false;    // false when the scaler skipped the step, or the loss was not finite
    bool non_finite_loss = false;  // a micro-batch's loss was inf/NaN (poisoned data, divergence)
    double grad_norm = 0.0;  // before clipping; 0 when not clipping
  };

  // scheduler (optional) is stepped once per run(), told whether the step was skipped.
  TrainStep(optim::Optimizer& optimizer, amp::GradScaler& scaler, const Options& options,
            optim::LRScheduler* scheduler = nullptr);
  // loss_fn(i) runs the forward pass of micro-batch i and returns its loss.
  Result run(const std::function<Tensor(int micro_batch)>& loss_fn);
  // Called after the backward passes, before unscaling: the gradients are still the scaled
  // values that went through half precision (what an underflow diagnostic must look at).
  void set_gradient_probe(std::function<void()> probe) { probe_ = std::move(probe); }

 private:
  bool any_rank(bool flag, const Device& device);  // flag or'ed over the ranks of options_.ddp's group

  optim::Optimizer& optimizer_;
  amp::GradScaler& scaler_;
  Options options_;
  optim::LRScheduler* scheduler_;
  std::function<void()> probe_;
};

}  // namespace demi::training

namespace demi::amp {
// Its former name (it lived in framework/amp until amp stopped depending on dist).
using TrainStep [[deprecated("use demi::training::TrainStep (framework/training/train_step.h)")]] =
    training::TrainStep;
}  // namespace demi::amp

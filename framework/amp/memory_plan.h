// amp::plan_memory: what training a model will hold, by memory_report()'s categories, before a run:
// the arithmetic of parameters, gradients, optimizer state and fp32 masters, and saved activations
// from traced forward passes (checkpointed modules as their inputs, plus backward's recomputation of
// one of them). "What does bf16 save me?" answered without running out of memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace demi::amp {

struct MemoryPlanOptions {
  Shape input_shape;              // one training batch of inputs, e.g. [128, 3, 32, 32]
  // With gradient accumulation, input_shape is one micro-batch, sliced (a view) from a batch of
  // micro_batches of them, as train_cifar's --accum slices: an op that saves its input (the first
  // convolution) then keeps the whole batch's storage, and memory_report() counts all of it.
  int64_t micro_batches = 1;
  DType autocast = DType::F32;    // F16 / BF16: the forward runs under autocast to it
  int optimizer_state_tensors = 1;  // fp32 tensors per parameter: SGD with momentum 1, AdamW 2, plain SGD 0
  optim::MasterWeights masters = optim::MasterWeights::Fp32;  // for half parameters
  // A GradScaler unscales the gradients (fp16 training): a half parameter with an fp32 master then
  // also holds an fp32 gradient beside its half one (GradScaler::unscale_ writes the true gradient
  // there). Without loss scaling (bf16) the step reads the half gradient directly.
  bool loss_scaling = false;
  bool lookahead = false;         // an fp32 running average of every parameter and buffer
  // The loss on the model's outputs, traced with it (cross-entropy keeps its logits for backward:
  // 8 KB an image with 2048 classes); without it only the model's own saved tensors are planned.
  std::function<Tensor(const Tensor& outputs)> loss;
};

// Predicted peak bytes by category (memory_report()'s, less "other": temporaries and outputs come and
// go inside the kernels and ops, and are not predicted).
struct MemoryPlan {
  int64_t parameters = 0;         // parameters and buffers, in their dtypes
  int64_t gradients = 0;          // a gradient per trainable parameter (+ the fp32 one of each master, when unscaled)
  int64_t optimizer_state = 0;    // moments / momentum buffers (and lookahead's averages)
  int64_t master_weights = 0;     // fp32 copies of half parameters
  // What is kept for backward at the batch of input_shape, at its peak: the end of the forward pass,
  // or, with checkpointed modules, backward's rerun of one of them when that holds more.
  int64_t saved_activations = 0;
  // The traced forward passes (batch 1 and 2): saved bytes = fixed + per_sample * batch. Fixed is
  // what does not grow with the batch (e.g. fp32 weights cast to half under autocast).
  int64_t saved_fixed = 0, saved_per_sample = 0;
  // Checkpointed modules (nn::Sequential::checkpoint_blocks, demi::checkpoint in a forward) keep
  // only their inputs in the forward pass; backward reruns them one at a time. What is held while
  // it reruns the one that holds the most at this batch, in the same form (0 without checkpointing).
  int64_t recompute_fixed = 0, recompute_per_sample = 0;

  int64_t total() const { return parameters + gradients + optimizer_state + master_weights + saved_activations; }
  // One row per category, in MB, and the total.
  std::string str() const;
};

// The plan for training `model` as it is (its parameters' dtypes and devices, the trainable ones
// being those that require grad, the modules it checkpoints) with `options`. Runs two forward
// passes in training mode, at batch 1 and 2, to measure the saved activations with autograd's
// saved-bytes counter (and autograd::RecomputeTrace for the checkpointed modules), then puts back
// the buffers they moved (batch-norm statistics): the model is left as it was.
MemoryPlan plan_memory(nn::Module& model, const MemoryPlanOptions& options);

// The same arithmetic for `num_params` trainable parameters of `param_dtype`, without a model and
// without allocating anything (saved activations are 0): 100M fp32 parameters with AdamW are
// 0.4 GB of weights, 0.4 GB of gradients and 0.8 GB of moments.
MemoryPlan plan_state_memory(int64_t num_params, DType param_dtype, const MemoryPlanOptions& options);

}  // namespace demi::amp

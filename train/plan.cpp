// train_cifar --plan: the memory a run with these flags will hold, by category, before it starts.
// The model is built as run_training builds it (recipe, --half-params), without CIFAR-10 (airbench's
// whitening stem keeps random filters of its shape), and handed to amp::plan_memory.
#include <iomanip>
#include <iostream>

#include "train/components.h"
#include "train/trainer.h"

namespace demi::train {
namespace {

// Tensors of optimizer state per parameter: SGD keeps a momentum buffer when it has momentum,
// AdamW two moments; Muon a momentum buffer for its matrices and for its SGD groups alike.
int optimizer_state_tensors(const TrainerConfig& c) {
  switch (c.optimizer) {
    case OptimizerKind::AdamW: return 2;
    case OptimizerKind::Muon: return 1;
    case OptimizerKind::Sgd: break;
  }
  return c.momentum > 0.0 ? 1 : 0;
}

}  // namespace

void print_memory_plan(const TrainerConfig& c, std::ostream& out) {
  check_config(c);
  const DType dtype = compute_dtype(c.precision);
  std::shared_ptr<nn::Module> model = make_model(c, c.device, nullptr);
  amp::MemoryPlanOptions o;
  o.input_shape = {c.batch_size / c.accum, 3, 32, 32};  // one micro-batch's activations live at a time
  o.micro_batches = c.accum;
  o.autocast = dtype;
  o.optimizer_state_tensors = optimizer_state_tensors(c);
  o.masters = c.master_weights;
  o.loss_scaling = dtype == DType::F16 && c.loss_scale.kind != LossScale::Kind::None;
  o.lookahead = c.lookahead;
  o.loss = [](const Tensor& logits) {  // the run's loss: cross-entropy (labels do not change its memory)
    return cross_entropy(logits, zeros({logits.size(0)}, DType::I64, logits.device()));
  };
  const amp::MemoryPlan plan = amp::plan_memory(*model, o);

  out << "memory plan: " << name_of(c.model) << " " << name_of(c.precision)
      << (c.half_params ? " (half params, " : " (") << "master weights " << name_of(c.master_weights) << "), "
      << name_of(c.optimizer) << ", batch " << c.batch_size
      << (c.accum > 1 ? " in " + std::to_string(c.accum) + " micro-batches" : std::string())
      << (c.checkpoint_activations ? ", activations checkpointed" : "") << ", on " << c.device << "\n"
      << plan.str() << std::fixed << std::setprecision(3) << "saved activations, traced at batch 1 and 2: "
      << plan.saved_fixed / 1e6 << " MB + " << plan.saved_per_sample / 1e6 << " MB per image"
      << (c.checkpoint_activations ? " after the forward pass (checkpointed blocks keep their inputs)" : "") << "\n";
  if (c.checkpoint_activations) {
    out << "while backward recomputes one block at a time: at most " << plan.recompute_fixed / 1e6 << " MB + "
        << plan.recompute_per_sample / 1e6 << " MB per image\n";
  }
  out << "not planned: temporaries and outputs (memory_report's \"other\"), the data loader's batches, "
         "and the allocator's cache\n";
}

}  // namespace demi::train

// train_cifar --plan: the memory a run with these flags will hold, by category, before it starts.
// The model is built as run_training builds it (recipe, --half-params), without CIFAR-10 (airbench's
// whitening stem keeps random filters of its shape), and handed to amp::plan_memory.
#include <iomanip>
#include <iostream>

#include "train/recipe.h"
#include "train/trainer.h"

namespace demi::train {

void print_memory_plan(const TrainerConfig& c, std::ostream& out) {
  check_config(c);
  const DType dtype = compute_dtype(c.precision);
  Generator gen(c.seed);
  std::shared_ptr<nn::Module> model = make_recipe_model(c, gen, nullptr);
  model->to(c.device);
  if (c.half_params) model->to(dtype);  // BatchNorm stays fp32
  amp::MemoryPlanOptions o;
  o.input_shape = {c.batch_size / c.accum, 3, 32, 32};  // one micro-batch's activations live at a time
  o.autocast = dtype;
  // SGD keeps a momentum buffer when it has momentum, AdamW two moments; Muon a momentum buffer
  // for its matrices and for its SGD groups alike.
  o.optimizer_state_tensors = c.optimizer == OptimizerKind::AdamW
                                  ? 2
                                  : (c.optimizer == OptimizerKind::Muon || c.momentum > 0.0 ? 1 : 0);
  o.masters = c.master_weights;
  o.loss_scaling = dtype == DType::F16 && c.loss_scale.kind != LossScale::Kind::None;
  o.lookahead = c.lookahead;
  o.loss = [](const Tensor& logits) {  // the run's loss: cross-entropy (labels do not change its memory)
    return cross_entropy(logits, zeros({logits.size(0)}, DType::I64, logits.device()));
  };
  const amp::MemoryPlan plan = amp::plan_memory(*model, o);

  out << "memory plan: " << name_of(c.model) << " " << name_of(c.precision) << (c.half_params ? " (half params, " : " (")
      << "master weights " << name_of(c.master_weights) << "), " << name_of(c.optimizer) << ", batch " << c.batch_size
      << (c.accum > 1 ? " in " + std::to_string(c.accum) + " micro-batches" : std::string()) << ", on "
      << c.device << "\n"
      << plan.str() << std::fixed << std::setprecision(3) << "saved activations, traced at batch 1 and 2: "
      << plan.saved_fixed / 1e6 << " MB + " << plan.saved_per_sample / 1e6 << " MB per image\n"
      << "not planned: temporaries and outputs (memory_report's \"other\"), the data loader's batches, "
         "and the allocator's cache\n";
}

}  // namespace demi::train

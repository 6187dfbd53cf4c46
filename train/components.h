// The parts a run trains with, each built by its own factory from the config: the model (as the
// recipe initialises it), its parameter groups, the optimizer, the GradScaler, the lr schedule and
// lookahead. None needs CIFAR-10 (only airbench's whitening stem is fitted to training images,
// and without them it keeps random filters), so each is testable alone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "datasets/data_loader.h"
#include "framework/demi/demi.h"
#include "framework/dist/distributed_data_parallel.h"
#include "train/config.h"
#include "train/environment.h"
#include "train/recipe.h"

namespace demi::train {

// How many steps an epoch and the whole run take (at least 2, so that every schedule has a
// warm-up point and an end point).
struct StepCounts {
  int64_t per_epoch = 0;
  int64_t total = 0;
};
StepCounts step_counts(const TrainerConfig& c, int64_t batches_per_epoch);

struct Components {
  std::shared_ptr<nn::Module> model;
  std::vector<ParamGroup> groups;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<optim::LRScheduler> schedule;    // null: the optimizer's lr throughout
  std::unique_ptr<optim::Lookahead> lookahead;     // null: no --lookahead
  std::shared_ptr<dist::DistributedDataParallel> ddp;  // set by distribute(); null: one process
  StepCounts steps;

  // What the training forward runs through: the DDP wrapper in a data-parallel run.
  nn::Module& net() { return ddp ? static_cast<nn::Module&>(*ddp) : *model; }
};

// The recipe's model on `device`, seeded by --seed (Generator(seed) for the weights, then
// manual_seed(seed) for the global generator), in the half dtype with --half-params (BatchNorm
// stays fp32), with each top-level block checkpointed under --checkpoint-activations. train_set:
// airbench's whitening images; nullptr keeps the stem random.
std::shared_ptr<nn::Module> make_model(const TrainerConfig& c, const Device& device, const data::Dataset* train_set);
// --checkpoint-activations: each top-level block of `model` (a `kind`) runs under demi::checkpoint.
// SmallCNN's blocks start at each convolution of `features` (a pool joins the block before it);
// AirNet's are `blocks.N`; a CCT's are its tokenizer's conv stages (as SmallCNN's) and each encoder
// layer, `encoder.layers.N`.
void checkpoint_top_level_blocks(nn::Module& model, ModelKind kind);

// --optimizer over the recipe's groups: SGD (Nesterov when momentum > 0), AdamW, or Muon with its
// SGD groups in the recipe's order.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerConfig& c, const std::vector<ParamGroup>& groups);

// --loss-scale for the run's dtype: dynamic scaling only in fp16 (bf16 has fp32's range), a fixed
// scale starts there; `group` (may be null) makes every rank skip a step together.
amp::GradScaler::Options scaler_options(const TrainerConfig& c, DType dtype,
                                        const std::shared_ptr<dist::ProcessGroup>& group);

// --schedule over `steps`, plus each group with train_epochs > 0 (ParamGroup). Null when nothing
// changes the lr.
std::unique_ptr<optim::LRScheduler> make_schedule(const TrainerConfig& c, optim::Optimizer& optimizer,
                                                  const std::vector<ParamGroup>& groups, const StepCounts& steps);

// airbench94's lookahead: from epoch 3 (0-based) on, every 5 steps the weights move to an average
// that trails them by a decay of 0.95^5 (step / total)^3: little at first, a strong pull at the
// end. The first such step only starts the average (decay 0: the weights as they are). The decay
// after `step` (1-based), or nullopt when this step does not touch the average.
std::optional<double> lookahead_decay(int64_t step, const StepCounts& steps);
// Whether the average exists after `step`: from then on each epoch ends on it (decay 1).
bool lookahead_started(int64_t step, const StepCounts& steps);

// All of the above for a run on env's device and dtype.
Components make_components(const TrainerConfig& c, const Environment& env, const data::Dataset* train_set,
                           const StepCounts& steps);

// Data parallel (env.group set): batch norm over all ranks with --sync-bn, and the DDP wrapper,
// which starts every rank from rank 0's weights. Call after restoring a checkpoint.
void distribute(Components& parts, const Environment& env, bool sync_batch_norm);

}  // namespace demi::train

// Factories for the model, optimizer, GradScaler, lr schedule and lookahead of a run.
#include "train/components.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/dist/sync_batch_norm.h"
#include "models/cct.h"

namespace demi::train {
namespace {

constexpr int64_t kLookaheadEvery = 5;
constexpr int64_t kLookaheadStartEpoch = 3;

// The step that starts the lookahead average: the first multiple of kLookaheadEvery in epoch
// kLookaheadStartEpoch or later (steps are 1-based: epoch e holds steps e * per_epoch + 1 ...).
int64_t first_lookahead_step(const StepCounts& steps) {
  return (kLookaheadStartEpoch * steps.per_epoch / kLookaheadEvery + 1) * kLookaheadEvery;
}

// An optimizer over the recipe's parameter groups; options(group) gives each group's options.
template <typename Optimizer, typename OptionsOf>
std::unique_ptr<optim::Optimizer> make_grouped(const std::vector<ParamGroup>& groups, OptionsOf options) {
  std::unique_ptr<Optimizer> opt;
  for (const ParamGroup& g : groups) {
    if (!opt) opt = std::make_unique<Optimizer>(g.params, options(g));
    else opt->add_param_group(g.params, options(g));
  }
  return opt;
}

optim::SGD::Options sgd_options(const TrainerConfig& c, const ParamGroup& g) {
  optim::SGD::Options o;
  o.lr = c.lr * g.lr_scale;
  o.momentum = c.momentum;
  o.nesterov = c.momentum > 0.0;
  o.weight_decay = c.weight_decay * g.weight_decay_scale;
  o.master_weights = c.master_weights;
  o.rounding = c.rounding;
  o.rounding_seed = c.seed;
  return o;
}

optim::AdamW::Options adamw_options(const TrainerConfig& c, const ParamGroup& g) {
  optim::AdamW::Options o;
  o.lr = c.lr * g.lr_scale;
  o.weight_decay = c.weight_decay * g.weight_decay_scale;
  o.master_weights = c.master_weights;
  o.rounding = c.rounding;
  o.rounding_seed = c.seed;
  return o;
}

// The recipe's Muon groups (filters) and SGD groups (everything else), in the recipe's order.
std::unique_ptr<optim::Optimizer> make_muon(const TrainerConfig& c, const std::vector<ParamGroup>& groups) {
  std::unique_ptr<optim::Muon> muon;
  for (const ParamGroup& g : groups) {
    if (g.muon) {
      optim::Muon::Options o = *g.muon;
      o.lr = c.lr * g.lr_scale;
      o.master_weights = c.master_weights;
      if (!muon) muon = std::make_unique<optim::Muon>(g.params, o);
      else muon->add_param_group(g.params, o);
    } else {
      DEMI_CHECK(muon, "--optimizer muon: the recipe's first parameter group must be a Muon group");
      muon->add_param_group(g.params, sgd_options(c, g));  // an SGD group: SGD::Options
    }
  }
  return muon;
}

// The --schedule part of make_schedule.
std::unique_ptr<optim::LRScheduler> make_flag_schedule(ScheduleKind kind, optim::Optimizer& opt,
                                                       const StepCounts& steps) {
  const int64_t total = steps.total;
  switch (kind) {
    case ScheduleKind::OneCycle:
      // The lr only: the recipe's momentum stays the optimizer's (--momentum), as in every run
      // docs/BENCHMARKS.md records (PyTorch's OneCycleLR would cycle it between 0.85 and 0.95).
      return std::make_unique<optim::OneCycle>(opt, total, 0.3, 25.0, 1e4, optim::OneCycle::Momentum{false});
    case ScheduleKind::Cosine:
      return std::make_unique<optim::CosineWithWarmup>(opt, std::min<int64_t>(steps.per_epoch, total / 10), total);
    case ScheduleKind::Linear: {
      // airbench's np.interp points; the peak at least one step in, so that a run of a few steps
      // (total >= 2) still has increasing points.
      const double t = static_cast<double>(total);
      return std::make_unique<optim::PiecewiseLinear>(
          opt, std::vector<optim::PiecewiseLinear::Point>{{0.0, 0.2}, {std::max(1.0, std::floor(0.23 * t)), 1.0},
                                                          {t, 0.07}});
    }
    case ScheduleKind::LinearDecay:
      return std::make_unique<optim::PiecewiseLinear>(
          opt, std::vector<optim::PiecewiseLinear::Point>{{0.0, 1.0}, {static_cast<double>(total), 0.0}});
    case ScheduleKind::Step:
      return std::make_unique<optim::StepLR>(opt, std::max<int64_t>(1, total / 3), 0.1);
    case ScheduleKind::None:
      return nullptr;
  }
  DEMI_INTERNAL_CHECK(false, "unknown schedule ", static_cast<int>(kind));
  return nullptr;
}

// The child `name` of `model`, which must be an nn::Sequential.
nn::Sequential& sequential_child(nn::Module& model, const std::string& name) {
  for (const auto& [child_name, child] : model.named_children()) {
    auto* seq = dynamic_cast<nn::Sequential*>(child.get());
    if (child_name == name && seq) return *seq;
  }
  DEMI_THROW("--checkpoint-activations: the model has no Sequential named '", name, "'");
}

// A block from each convolution of `seq` up to the next: the layers after it (norm, activation,
// pool) join it.
void checkpoint_convolution_blocks(nn::Sequential& seq) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < seq.size(); ++i) {
    if (dynamic_cast<nn::Conv2d*>(&seq[i])) starts.push_back(i);
  }
  seq.checkpoint_blocks(starts);
}

// Each child of `seq` a block of its own.
void checkpoint_each_child(nn::Sequential& seq) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < seq.size(); ++i) starts.push_back(i);
  seq.checkpoint_blocks(starts);
}

}  // namespace

void checkpoint_top_level_blocks(nn::Module& model, ModelKind kind) {
  switch (kind) {
    case ModelKind::SmallCNN:
      checkpoint_convolution_blocks(sequential_child(model, "features"));
      return;
    case ModelKind::AirNet:
      checkpoint_each_child(sequential_child(model, "blocks"));
      return;
    case ModelKind::Cct7:
    case ModelKind::Cct4: {
      auto& cct = dynamic_cast<models::Cct&>(model);
      checkpoint_convolution_blocks(cct.tokenizer());
      checkpoint_each_child(cct.encoder().layers());
      return;
    }
  }
  DEMI_INTERNAL_CHECK(false, "unknown model ", static_cast<int>(kind));
}

StepCounts step_counts(const TrainerConfig& c, int64_t batches_per_epoch) {
  return {batches_per_epoch, std::max<int64_t>(2, batches_per_epoch * c.epochs)};
}

std::shared_ptr<nn::Module> make_model(const TrainerConfig& c, const Device& device, const data::Dataset* train_set) {
  Generator gen(c.seed);
  manual_seed(c.seed);
  std::shared_ptr<nn::Module> model = make_recipe_model(c, gen, train_set);
  model->to(device);
  if (c.half_params) model->to(compute_dtype(c.precision));  // BatchNorm stays fp32
  if (c.channels_last) model->to(MemoryFormat::ChannelsLast);
  if (c.checkpoint_activations) checkpoint_top_level_blocks(*model, c.model);
  return model;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerConfig& c, const std::vector<ParamGroup>& groups) {
  switch (c.optimizer) {
    case OptimizerKind::Sgd:
      return make_grouped<optim::SGD>(groups, [&](const ParamGroup& g) { return sgd_options(c, g); });
    case OptimizerKind::AdamW:
      return make_grouped<optim::AdamW>(groups, [&](const ParamGroup& g) { return adamw_options(c, g); });
    case OptimizerKind::Muon:
      return make_muon(c, groups);
  }
  DEMI_INTERNAL_CHECK(false, "unknown optimizer ", static_cast<int>(c.optimizer));
  return nullptr;
}

amp::GradScaler::Options scaler_options(const TrainerConfig& c, DType dtype,
                                        const std::shared_ptr<dist::ProcessGroup>& group) {
  amp::GradScaler::Options o;
  if (group) o.reduce_found_inf = dist::found_inf_reduction(group);  // every rank skips together
  switch (c.loss_scale.kind) {
    case LossScale::Kind::Dynamic: o.enabled = dtype == DType::F16; break;  // bf16 has fp32's range
    case LossScale::Kind::None: o.enabled = false; break;
    case LossScale::Kind::Fixed: o.init_scale = c.loss_scale.value; break;
  }
  return o;
}

std::unique_ptr<optim::LRScheduler> make_schedule(const TrainerConfig& c, optim::Optimizer& optimizer,
                                                  const std::vector<ParamGroup>& groups, const StepCounts& steps) {
  std::unique_ptr<optim::LRScheduler> schedule = make_flag_schedule(c.schedule, optimizer, steps);
  // Groups trained for their first epochs only: lr 0 after them; over them a linear decay to 0
  // whatever --schedule says, or --schedule's own factor.
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].train_epochs <= 0) continue;
    if (!schedule) schedule = std::make_unique<optim::LambdaLR>(optimizer, [](int64_t) { return 1.0; });
    const int64_t n = std::max<int64_t>(1, groups[g].train_epochs * steps.per_epoch);
    if (groups[g].decay_to_zero) {
      schedule->set_group_factor(g, [n](int64_t t) { return std::max(0.0, 1.0 - static_cast<double>(t) / n); });
    } else {
      const optim::LRScheduler* own = schedule.get();  // owns the function: outlives it
      schedule->set_group_factor(g, [n, own](int64_t t) { return t < n ? own->schedule_factor(t) : 0.0; });
    }
  }
  return schedule;
}

bool lookahead_started(int64_t step, const StepCounts& steps) { return step >= first_lookahead_step(steps); }

std::optional<double> lookahead_decay(int64_t step, const StepCounts& steps) {
  const int64_t first = first_lookahead_step(steps);
  if (step % kLookaheadEvery != 0 || step < first) return std::nullopt;
  if (step == first) return 0.0;
  const double progress = static_cast<double>(step) / static_cast<double>(steps.total);
  return std::pow(0.95, kLookaheadEvery) * progress * progress * progress;
}

Components make_components(const TrainerConfig& c, const Environment& env, const data::Dataset* train_set,
                           const StepCounts& steps) {
  Components parts;
  parts.steps = steps;
  parts.model = make_model(c, env.device, train_set);
  parts.groups = parameter_groups(c, *parts.model);
  parts.optimizer = make_optimizer(c, parts.groups);
  if (c.lookahead) parts.lookahead = std::make_unique<optim::Lookahead>(*parts.model, parts.optimizer.get());
  parts.scaler = std::make_unique<amp::GradScaler>(scaler_options(c, env.dtype, env.group));
  parts.schedule = make_schedule(c, *parts.optimizer, parts.groups, steps);
  return parts;
}

void distribute(Components& parts, const Environment& env, bool sync_batch_norm) {
  if (!env.group) return;
  if (sync_batch_norm) parts.model = dist::convert_sync_batch_norm(parts.model, env.group);
  parts.ddp = std::make_shared<dist::DistributedDataParallel>(parts.model, env.group);
}

}  // namespace demi::train

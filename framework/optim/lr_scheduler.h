// Learning-rate schedules driven by the iteration count. A step the GradScaler skipped is still
// an iteration: call step() once per iteration either way (TrainStep does), and nothing warns
// (PyTorch warns "lr_scheduler.step() before optimizer.step()" when the first fp16 step is skipped).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"

namespace demi::optim {

// How the optimizer step of an iteration ended (GradScaler::step's answer).
enum class StepOutcome { Taken, Skipped };

class LRScheduler {
 public:
  // Records each group's current lr as its base lr and sets the lr of iteration 0.
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Moves to the next iteration and sets every group's lr. A skipped optimizer step is counted,
  // not warned about.
  void step(StepOutcome outcome = StepOutcome::Taken);
  int64_t iteration() const { return iteration_; }
  int64_t skipped_steps() const { return skipped_; }
  // lr of group 0 now.
  double last_lr() const { return optimizer_.lr(0); }
  // The schedule's multiplier of the base lr at `iteration`, whatever set_group_factor gave a group.
  double schedule_factor(int64_t iteration) const { return factor(iteration); }
  // Group `group` follows `factor` (of its base lr, by iteration) instead of the schedule's, as a
  // per-group lambda of torch's LambdaLR does (airbench trains its whitening bias for the first
  // epochs only). Sets the group's lr for the current iteration.
  void set_group_factor(size_t group, std::function<double(int64_t)> factor);

 protected:
  // The multiplier of the base lr at `iteration` (0-based).
  virtual double factor(int64_t iteration) const = 0;
  // Anything else the schedule sets at `iteration` (OneCycle's momentum); called after the lrs.
  virtual void apply_more(int64_t iteration) {}
  void apply();  // subclasses call it at the end of their constructor
  Optimizer& optimizer_;

 private:
  std::vector<double> base_lrs_;
  std::vector<std::function<double(int64_t)>> group_factors_;  // per group; empty: the schedule's
  int64_t iteration_ = 0;
  int64_t skipped_ = 0;
};

// lr = base * factor(iteration), as torch.optim.lr_scheduler.LambdaLR with one function.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  double factor(int64_t iteration) const override;

 private:
  std::function<double(int64_t)> factor_;
};

// lr = base * gamma^(iteration / step_size), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double factor(int64_t iteration) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Linear warm-up from 0 over warmup_iterations, then cosine decay to min_factor * base at
// total_iterations (and held there).
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& optimizer, int64_t warmup_iterations, int64_t total_iterations, double min_factor = 0.0);

 protected:
  double factor(int64_t iteration) const override;

 private:
  int64_t warmup_, total_;
  double min_factor_;
};

// torch.optim.lr_scheduler.OneCycleLR (cosine annealing): the optimizer's lr is max_lr; it starts
// at max_lr / div_factor, rises over pct_start of total_iterations, then falls to
// max_lr / (div_factor * final_div_factor). With cycle_momentum (PyTorch's default) the momentum
// (AdamW: beta1) moves the other way, from max_momentum down to base_momentum at the peak and back:
// it replaces the optimizer's own, even a momentum of 0, as in PyTorch. An optimizer without
// momentum needs cycle_momentum = false.
struct OneCycleMomentum {
  bool cycle = true;  // PyTorch's cycle_momentum
  double base = 0.85;
  double max = 0.95;
};
class OneCycle : public LRScheduler {
 public:
  using Momentum = OneCycleMomentum;
  OneCycle(Optimizer& optimizer, int64_t total_iterations, double pct_start = 0.3, double div_factor = 25.0,
           double final_div_factor = 1e4, Momentum momentum = {});

 protected:
  double factor(int64_t iteration) const override;
  void apply_more(int64_t iteration) override;

 private:
  // The phase of `iteration` (true: rising) and how far along it is, in [0, 1].
  std::pair<bool, double> phase(int64_t iteration) const;
  int64_t total_;
  double pct_start_, div_factor_, final_div_factor_;
  Momentum momentum_;
};

// Linear interpolation between (iteration, factor) points, held flat beyond the last (numpy.interp,
// which airbench's schedule uses): {{0, 0.2}, {0.23 * total, 1}, {total, 0.07}} warms up from 0.2x
// the base lr to 1x over the first 23% of the run and decays linearly to 0.07x at its end.
class PiecewiseLinear : public LRScheduler {
 public:
  struct Point {
    double iteration;
    double factor;
  };
  PiecewiseLinear(Optimizer& optimizer, std::vector<Point> points);

 protected:
  double factor(int64_t iteration) const override;

 private:
  std::vector<Point> points_;
};

}  // namespace demi::optim

// The schedules: each a factor of the base lr as a function of the iteration.
#include "framework/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "framework/core/error.h"

namespace demi::optim {
namespace {
constexpr double kPi = 3.14159265358979323846;
double cosine(double from, double to, double progress) {  // progress in [0, 1]
  return to + (from - to) * 0.5 * (1.0 + std::cos(kPi * progress));
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
  group_factors_.resize(base_lrs_.size());
}

void LRScheduler::apply() {
  const double f = factor(iteration_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    optimizer_.set_lr(g, base_lrs_[g] * (group_factors_[g] ? group_factors_[g](iteration_) : f));
  }
  apply_more(iteration_);
}

void LRScheduler::set_group_factor(size_t group, std::function<double(int64_t)> factor) {
  DEMI_CHECK(group < base_lrs_.size(), "LRScheduler::set_group_factor: group ", group, " does not exist (the optimizer has ",
             base_lrs_.size(), ")");
  group_factors_[group] = std::move(factor);
  apply();
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  DEMI_CHECK(static_cast<bool>(factor_), "LambdaLR: the factor function is empty");
  apply();
}
double LambdaLR::factor(int64_t iteration) const { return factor_(iteration); }

void LRScheduler::step(StepOutcome outcome) {
  if (outcome == StepOutcome::Skipped) ++skipped_;
  ++iteration_;
  apply();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  DEMI_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}
double StepLR::factor(int64_t iteration) const {
  return std::pow(gamma_, static_cast<double>(iteration / step_size_));
}

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, int64_t warmup, int64_t total, double min_factor)
    : LRScheduler(optimizer), warmup_(warmup), total_(total), min_factor_(min_factor) {
  DEMI_CHECK(warmup >= 0 && total > warmup, "CosineWithWarmup: need 0 <= warmup_iterations < total_iterations, got ",
             warmup, " and ", total);
  apply();
}
double CosineWithWarmup::factor(int64_t it) const {
  if (it < warmup_) return static_cast<double>(it + 1) / static_cast<double>(warmup_ + 1);
  const double progress = std::min(1.0, static_cast<double>(it - warmup_) / static_cast<double>(total_ - warmup_));
  return cosine(1.0, min_factor_, progress);
}

OneCycle::OneCycle(Optimizer& optimizer, int64_t total, double pct_start, double div_factor, double final_div_factor,
                   Momentum momentum)
    : LRScheduler(optimizer), total_(total), pct_start_(pct_start), div_factor_(div_factor),
      final_div_factor_(final_div_factor), momentum_(momentum) {
  DEMI_CHECK(total > 1 && pct_start > 0.0 && pct_start < 1.0, "OneCycle: need total_iterations > 1 and pct_start in "
             "(0, 1), got ", total, " and ", pct_start);
  DEMI_CHECK(!momentum.cycle || optimizer.has_momentum(), "OneCycle: the optimizer has no momentum (nor beta1) to "
             "cycle; pass OneCycle::Momentum{false} (PyTorch's cycle_momentum=False)");
  apply();
}
std::pair<bool, double> OneCycle::phase(int64_t it) const {
  // PyTorch's phase ends: iteration pct_start * total - 1 peaks, total - 1 ends.
  const double peak = pct_start_ * static_cast<double>(total_) - 1.0;
  const double end = static_cast<double>(total_) - 1.0;
  const double t = std::min(static_cast<double>(it), end);
  if (t <= peak) return {true, t / peak};
  return {false, (t - peak) / (end - peak)};
}
double OneCycle::factor(int64_t it) const {
  const double start = 1.0 / div_factor_, last = start / final_div_factor_;
  const auto [rising, progress] = phase(it);
  return rising ? cosine(start, 1.0, progress) : cosine(1.0, last, progress);
}
void OneCycle::apply_more(int64_t it) {
  if (!momentum_.cycle) return;
  const auto [rising, progress] = phase(it);
  const double m = rising ? cosine(momentum_.max, momentum_.base, progress) : cosine(momentum_.base, momentum_.max, progress);
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) optimizer_.set_momentum(g, m);
}

PiecewiseLinear::PiecewiseLinear(Optimizer& optimizer, std::vector<Point> points)
    : LRScheduler(optimizer), points_(std::move(points)) {
  DEMI_CHECK(!points_.empty(), "PiecewiseLinear: needs at least one (iteration, factor) point");
  for (size_t i = 1; i < points_.size(); ++i) {
    DEMI_CHECK(points_[i].iteration > points_[i - 1].iteration, "PiecewiseLinear: iterations must increase, got ",
               points_[i - 1].iteration, " then ", points_[i].iteration, " (points ", i - 1, " and ", i, ")");
  }
  apply();
}
double PiecewiseLinear::factor(int64_t iteration) const {
  const double t = static_cast<double>(iteration);
  if (t <= points_.front().iteration) return points_.front().factor;
  for (size_t i = 1; i < points_.size(); ++i) {
    const Point &a = points_[i - 1], &b = points_[i];
    if (t <= b.iteration) return a.factor + (b.factor - a.factor) * (t - a.iteration) / (b.iteration - a.iteration);
  }
  return points_.back().factor;
}

}  // namespace demi::optim

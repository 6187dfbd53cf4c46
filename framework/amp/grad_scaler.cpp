// GradScaler: the state machine on the host, the numbers on the device (scale, growth tracker,
// found_inf, the step counts); a step makes no host read with SGD and AdamW, which skip on the device.
#include "framework/amp/grad_scaler.h"

#include <cmath>
#include <sstream>

#include "framework/autograd/grad_mode.h"
#include "framework/core/warning.h"
#include "framework/nn/clip_grad.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::amp {

GradScaler::GradScaler(const Options& o) : options_(o) {
  DEMI_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale must be positive and finite, got ",
             o.init_scale);
  DEMI_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  DEMI_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
             o.backoff_factor);
  DEMI_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be positive, got ", o.growth_interval);
}

void GradScaler::lazy_init(const Device& device) {
  if (scale_.defined()) return;
  scale_ = full({}, options_.init_scale, DType::F32, device);
  growth_tracker_ = full({}, static_cast<double>(init_growth_tracker_), DType::I64, device);
  step_counts_ = zeros({3}, DType::I64, device);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  DEMI_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler::scale: the loss must be a floating tensor");
  lazy_init(loss.device());
  DEMI_CHECK(loss.device() == scale_.device(), "GradScaler::scale: the loss is on ", loss.device(),
             " but the scaler's state is on ", scale_.device(), "; use one scaler per device");
  return loss.to(DType::F32) * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  OptimizerState& state = per_optimizer_[&opt];
  DEMI_CHECK(state.stage != Stage::Unscaled, "GradScaler::unscale_: unscale_() has already been called on this "
             "optimizer since the last update(); call it once per step, before clipping (in gradient "
             "accumulation, only at the step boundary)");
  DEMI_CHECK(state.stage != Stage::Stepped, "GradScaler::unscale_: unscale_() is being called after step(); call "
             "it before step(), or call update() to start the next iteration");
  DEMI_CHECK(scale_.defined(), "GradScaler::unscale_: no scale yet; this may mean the script did not call "
             "scaler.scale(loss).backward() earlier in the iteration");
  NoGradGuard no_grad;
  // The fp32 rounding of the fp64 reciprocal, as PyTorch, so 1/scale is exact for powers of two.
  const Tensor inv_scale = pow(scale_.to(DType::F64), -1.0).to(DType::F32);
  state.found_inf = zeros({}, DType::F32, scale_.device());
  state.unscaled.clear();
  backend::UnscaleArgs args;
  const std::vector<optim::Optimizer::GradientTarget> targets = opt.unscale_targets();
  for (const optim::Optimizer::GradientTarget& t : targets) {
    DEMI_CHECK(t.grad.device() == scale_.device(), "GradScaler::unscale_: a gradient is on ", t.grad.device(),
               " but the scaler's state is on ", scale_.device());
    args.in.push_back(t.grad.storage_ref());
    args.out.push_back(detail::storage_ref_like(t.unscaled, t.grad));
    state.unscaled.push_back(t.unscaled);
  }
  args.inv_scale = inv_scale.ref();
  args.found_inf = state.found_inf.ref();
  kernels(scale_).unscale_check_finite(args);
  opt.adopt_unscaled(targets);  // p.grad() is now the true gradient the step will read
  // One rank's inf must stop every rank's step: otherwise the replicas silently diverge.
  if (options_.reduce_found_inf) options_.reduce_found_inf(state.found_inf);
  state.stage = Stage::Unscaled;
}

void GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return;
  }
  OptimizerState& state = per_optimizer_[&opt];
  DEMI_CHECK(state.stage != Stage::Stepped, "GradScaler::step: step() has already been called since the last "
             "update(); call update() once per iteration, after step()");
  if (state.stage == Stage::Ready) unscale_(opt);
  opt.step_unless(state.found_inf);
  state.stage = Stage::Stepped;
  last_found_inf_ = state.found_inf;
}

bool GradScaler::last_step_skipped() const {
  return options_.enabled && last_found_inf_.defined() && last_found_inf_.item<float>() != 0.0f;
}

int64_t GradScaler::step_count(int which) const {
  if (!options_.enabled || !step_counts_.defined()) return 0;
  const std::vector<int64_t> counts = step_counts_.to_vector<int64_t>();
  if (!warned_ && counts[2] > 0) warn_if_collapsed(counts[2], scale_.item<float>());
  return counts[static_cast<size_t>(which)];
}

// Collapse: checked where the host reads the scaler's state anyway (the getters), so that steps
// stay free of host reads; a loop that logs the scale hears of it at its next log.
void GradScaler::warn_if_collapsed(int64_t consecutive, double scale) const {
  if (warned_ || consecutive == 0 || (consecutive < options_.warn_after_consecutive_skips && scale >= 1.0)) return;
  warned_ = true;
  std::ostringstream msg;
  msg << "GradScaler: " << consecutive << " steps in a row were skipped for inf/NaN gradients and "
      << "the scale is now " << scale << ". The gradients overflow even without scaling: lower the learning "
      << "rate, clip gradients (scaler.clip_grad_norm_), or check the data for inf/NaN.";
  warn(msg.str());
}

void GradScaler::update() {
  if (!options_.enabled) return;
  Tensor found_inf;
  for (auto& [opt, state] : per_optimizer_) {
    if (!state.found_inf.defined()) continue;
    found_inf = found_inf.defined() ? found_inf + state.found_inf : state.found_inf;
  }
  DEMI_CHECK(found_inf.defined(), "GradScaler::update: no inf checks were recorded prior to update(); call "
             "step(optimizer) (or unscale_) first in each iteration");
  backend::ScaleUpdateArgs args;
  args.scale = scale_.ref();
  args.growth_tracker = growth_tracker_.ref();
  args.found_inf = found_inf.ref();
  args.step_counts = step_counts_.ref();
  args.growth_factor = options_.growth_factor;
  args.backoff_factor = options_.backoff_factor;
  args.growth_interval = options_.growth_interval;
  kernels(scale_).update_scale(args);
  per_optimizer_.clear();

  if (options_.min_scale || options_.max_scale) {  // on the device: no read of the scale
    NoGradGuard no_grad;
    scale_.clamp_(options_.min_scale, options_.max_scale);
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  DEMI_CHECK(new_scale > 0 && std::isfinite(new_scale), "GradScaler::update: new_scale must be positive and finite, got ",
             new_scale);
  DEMI_CHECK(scale_.defined(), "GradScaler::update: no scale yet; call scale(loss) first");
  kernels(scale_).fill(scale_.ref(), new_scale);
  per_optimizer_.clear();
}

Tensor GradScaler::clip_grad_norm_(optim::Optimizer& opt, double max_norm) {
  if (!options_.enabled) return nn::clip_grad_norm_(opt.parameters(), max_norm);
  OptimizerState& state = per_optimizer_[&opt];
  DEMI_CHECK(state.stage != Stage::Stepped, "GradScaler::clip_grad_norm_: called after step(); clip between "
             "backward() and step()");
  if (state.stage == Stage::Ready) unscale_(opt);
  return nn::detail::clip_gradients_(state.unscaled, max_norm);
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  if (!scale_.defined()) return options_.init_scale;
  const double scale = scale_.item<float>();
  if (!warned_ && step_counts_.defined()) warn_if_collapsed(step_counts_.to_vector<int64_t>()[2], scale);
  return scale;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(get_growth_tracker())}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  if (!options_.enabled) return;
  DEMI_CHECK(!state.empty(), "GradScaler::load_state_dict: the state is empty, possibly because it was saved "
             "from a disabled GradScaler");
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    DEMI_CHECK(state.count(key), "GradScaler::load_state_dict: missing key '", key, "'");
  }
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = static_cast<int64_t>(state.at("growth_interval"));
  if (scale_.defined()) {  // in place: a captured CUDA graph holds these very tensors
    NoGradGuard no_grad;
    scale_.fill_(state.at("scale"));
    growth_tracker_.fill_(state.at("_growth_tracker"));
    return;
  }
  // Not scaled yet: the values wait for the first scale(), which makes the state on the loss's
  // device (PyTorch keeps _init_scale and _init_growth_tracker so).
  options_.init_scale = state.at("scale");
  init_growth_tracker_ = static_cast<int64_t>(state.at("_growth_tracker"));
}

}  // namespace demi::amp

// amp::GradScaler: dynamic loss scaling with torch.amp.GradScaler's semantics (defaults, per-
// optimizer READY/UNSCALED/STEPPED state, errors, state_dict keys), plus what PyTorch lacks:
// bf16 and fp16 gradients unscaled alike, skip counters, and a warning when the scale collapses.
// The scale, growth tracker, found_inf and step counts live on the gradients' device; a step reads
// none of them (the optimizer skips on found_inf on the device), the getters do.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "framework/optim/optimizer.h"
#include "framework/tensor/tensor.h"

namespace demi::amp {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    bool enabled = true;
    std::optional<double> min_scale;  // none by default, as PyTorch
    std::optional<double> max_scale;
    // Warn once when this many steps in a row were skipped, or when the scale falls below 1.
    int64_t warn_after_consecutive_skips = 20;
    // Data parallel: unscale_ hands found_inf (a 0-d F32 on the device) to this hook to reduce it
    // (max) over all ranks, so every rank skips the same steps and the scales stay identical, as
    // PyTorch's ShardedGradScaler does with its process group. dist::found_inf_reduction(group)
    // gives the hook; the scaler itself knows nothing of processes.
    std::function<void(const Tensor& found_inf)> reduce_found_inf;
  };

  GradScaler() : GradScaler(Options{}) {}
  explicit GradScaler(const Options& options);

  // loss (cast to fp32 first, so a half loss times 65536 cannot overflow) times the scale.
  Tensor scale(const Tensor& loss);
  // Unscales opt's gradients in one fused pass that also records inf/NaN. Once per step.
  void unscale_(optim::Optimizer& opt);
  // Unscales if needed, then steps opt unless its gradients held inf/NaN, decided on the device
  // (Optimizer::step_unless): SGD and AdamW skip without the host reading found_inf, as PyTorch's
  // fused optimizers do; last_step_skipped() reads it when asked.
  void step(optim::Optimizer& opt);
  // Backs the scale off after a skipped step, or grows it after growth_interval clean ones.
  void update();
  // Sets the scale to new_scale.
  void update(double new_scale);
  // Unscales opt's gradients if not yet done, then clips them to max_norm (global L2 norm); returns
  // the norm of the true (unscaled) gradients. Clipping scaled gradients cannot be written.
  Tensor clip_grad_norm_(optim::Optimizer& opt, double max_norm);

  double get_scale() const;
  int64_t get_growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const Options& options() const { return options_; }

  // Beyond PyTorch: what happened to the steps, counted on the device by update() (one count per
  // iteration). Each getter is a host read, as get_scale() is; they also warn once when the scale
  // has collapsed (Options::warn_after_consecutive_skips).
  bool last_step_skipped() const;
  int64_t steps_taken() const { return step_count(0); }
  int64_t steps_skipped() const { return step_count(1); }
  int64_t consecutive_skips() const { return step_count(2); }
  // found_inf of the last step(): 0-d F32 on the device, nonzero when it was skipped; undefined
  // before the first step (and when disabled). Summed over the optimizers stepped since update().
  Tensor last_found_inf() const { return last_found_inf_; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    Tensor found_inf;               // 0-d F32 on the gradients' device
    std::vector<Tensor> unscaled;   // where unscale_ wrote the true gradients
  };
  void lazy_init(const Device& device);
  int64_t step_count(int which) const;  // 0 taken, 1 skipped, 2 skipped in a row
  void warn_if_collapsed(int64_t consecutive, double scale) const;

  Options options_;
  Tensor scale_;           // 0-d F32, created on the first scale() on the loss's device
  Tensor growth_tracker_;  // 0-d I64
  int64_t init_growth_tracker_ = 0;  // what growth_tracker_ starts at (load_state_dict before scale())
  Tensor step_counts_;     // 3 I64: taken, skipped, skipped in a row (ScaleUpdateArgs)
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_;
  Tensor last_found_inf_;
  mutable bool warned_ = false;
};

}  // namespace demi::amp

// optim::AdamW: torch.optim.AdamW (decoupled weight decay, bias correction) over parameter
// groups, one fused kernel call per parameter; moments are fp32, half parameters use fp32 masters.
#pragma once

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/optim/optimizer.h"

namespace demi::optim {

class AdamW : public Optimizer {
 public:
  struct Options {  // torch.optim.AdamW's defaults
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;
    MasterWeights master_weights = MasterWeights::Fp32;
    Rounding rounding = Rounding::Nearest;  // how steps write half params
    uint64_t rounding_seed = 0;             // the stochastic-rounding streams' seed
  };

  AdamW(const std::vector<Tensor>& params, const Options& options);
  // libtorch's short form: AdamW(params, lr), every other option at its default.
  // A template so that AdamW(params, {}) still means default Options, not lr = 0.
  template <typename Lr, typename = std::enable_if_t<std::is_arithmetic_v<Lr>>>
  AdamW(const std::vector<Tensor>& params, Lr lr) : AdamW(params, with_lr(static_cast<double>(lr))) {}
  void add_param_group(const std::vector<Tensor>& params, const Options& options);
  void step() override { step_unless(Tensor()); }
  void step_unless(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  bool supports_capturable() const override { return true; }
  std::vector<double> step_constants() const override;
  double lr(size_t group) const override { return options_.at(group).lr; }
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }
  // beta1, as PyTorch's OneCycleLR cycles betas[0].
  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return options_.at(group).beta1; }
  void set_momentum(size_t group, double momentum) override { options_.at(group).beta1 = momentum; }

  std::vector<Options>& group_options() { return options_; }

 private:
  static Options with_lr(double lr) {
    Options o;
    o.lr = lr;
    return o;
  }
  // "exp_avg", "exp_avg_sq" and "step" (a 0-d int64 tensor) once the parameter has stepped.
  std::vector<std::pair<std::string, Tensor>> slot_state(size_t group, size_t index) const override;
  void load_slot_state(size_t group, size_t index, std::map<std::string, Tensor>& named) override;

  struct State {
    Tensor exp_avg, exp_avg_sq;
    Tensor step;  // 0-d int64 on the parameter's device: steps taken (the kernel counts them)
  };
  std::vector<Options> options_;
  std::vector<std::vector<State>> state_;
};

}  // namespace demi::optim

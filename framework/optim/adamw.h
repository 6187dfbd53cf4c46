// optim::AdamW: torch.optim.AdamW (decoupled weight decay, bias correction) over parameter
// groups, one fused kernel call per parameter; moments are fp32, half parameters use fp32 masters.
#pragma once

#include <map>
#include <string>
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
  };

  AdamW(const std::vector<Tensor>& params, const Options& options);
  void add_param_group(const std::vector<Tensor>& params, const Options& options);
  void step() override;
  double lr(size_t group) const override { return options_.at(group).lr; }
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }

  std::vector<Options>& group_options() { return options_; }
  // "<group>.<index>.exp_avg", ".exp_avg_sq", ".step" (a one-element int64 tensor) and, for
  // half params, ".master".
  std::map<std::string, Tensor> state_dict() const override;
  // Restores what state_dict() gave (same parameters in the same groups); unknown keys throw.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::vector<Options> options_;
  std::vector<std::vector<State>> state_;
};

}  // namespace demi::optim

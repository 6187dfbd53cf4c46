// optim::SGD: torch.optim.SGD's update (momentum, dampening, weight decay, Nesterov) over
// parameter groups, one fused kernel call per parameter; momentum buffers are fp32, and half
// parameters are stepped through fp32 masters unless master_weights says otherwise.
#pragma once

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/optim/optimizer.h"

namespace demi::optim {

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;  // torch.optim.SGD's default
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;
    MasterWeights master_weights = MasterWeights::Fp32;
    Rounding rounding = Rounding::Nearest;  // how steps write half params
    uint64_t rounding_seed = 0;             // the stochastic-rounding streams' seed
  };

  SGD(const std::vector<Tensor>& params, const Options& options);
  // libtorch's short form: SGD(params, lr), every other option at its default.
  // A template so that SGD(params, {}) still means default Options, not lr = 0.
  template <typename Lr, typename = std::enable_if_t<std::is_arithmetic_v<Lr>>>
  SGD(const std::vector<Tensor>& params, Lr lr) : SGD(params, with_lr(static_cast<double>(lr))) {}
  // Virtual so that a subclass with per-group state (Muon) records a group added through an SGD&.
  virtual void add_param_group(const std::vector<Tensor>& params, const Options& options);
  void step() override;
  double lr(size_t group) const override { return options_.at(group).lr; }
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }

  // Each group's options (change lr here, as with PyTorch's param_groups).
  std::vector<Options>& group_options() { return options_; }

 protected:
  static Options with_lr(double lr) {
    Options o;
    o.lr = lr;
    return o;
  }
  SGD() = default;  // for subclasses that add their own groups (Muon)
  // torch.optim.SGD's update of slot i of group g (the fused kernel call).
  void sgd_update(size_t g, size_t i, const Slot& slot, const Tensor& grad);
  // Slot i of group g's momentum buffer (fp32; fp64 for fp64 params), created zeroed on first use.
  // `created` says whether this call made it.
  Tensor& momentum_buffer(size_t g, size_t i, bool* created = nullptr);

  // "momentum_buffer" once the parameter has stepped with momentum.
  std::vector<std::pair<std::string, Tensor>> slot_state(size_t group, size_t index) const override;
  void load_slot_state(size_t group, size_t index, std::map<std::string, Tensor>& named) override;

  std::vector<Options> options_;
  std::vector<std::vector<Tensor>> momentum_;  // per slot, created on first use
};

}  // namespace demi::optim

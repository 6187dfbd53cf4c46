// optim::SGD: torch.optim.SGD's update (momentum, dampening, weight decay, Nesterov) over
// parameter groups, one fused kernel call per parameter; momentum buffers are fp32, and half
// parameters are stepped through fp32 masters unless master_weights says otherwise.
#pragma once

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/optim/sgd_update.h"

namespace demi::optim {

class SGD : public Optimizer {
 public:
  using Options = SgdOptions;

  SGD(const std::vector<Tensor>& params, const Options& options);
  // libtorch's short form: SGD(params, lr), every other option at its default.
  // A template so that SGD(params, {}) still means default Options, not lr = 0.
  template <typename Lr, typename = std::enable_if_t<std::is_arithmetic_v<Lr>>>
  SGD(const std::vector<Tensor>& params, Lr lr) : SGD(params, with_lr(static_cast<double>(lr))) {}
  void add_param_group(const std::vector<Tensor>& params, const Options& options);
  void step() override { step_unless(Tensor()); }
  void step_unless(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  bool supports_capturable() const override { return true; }
  std::vector<double> step_constants() const override;
  double lr(size_t group) const override { return options_.at(group).lr; }
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }
  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return options_.at(group).momentum; }
  void set_momentum(size_t group, double momentum) override { options_.at(group).momentum = momentum; }

  // Each group's options (change lr here, as with PyTorch's param_groups).
  std::vector<Options>& group_options() { return options_; }

 private:
  static Options with_lr(double lr) {
    Options o;
    o.lr = lr;
    return o;
  }
  // "momentum_buffer" once the parameter has stepped with momentum.
  std::vector<std::pair<std::string, Tensor>> slot_state(size_t group, size_t index) const override;
  void load_slot_state(size_t group, size_t index, std::map<std::string, Tensor>& named) override;

  std::vector<Options> options_;
  MomentumBuffers momentum_;
};

}  // namespace demi::optim

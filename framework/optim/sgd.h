// optim::SGD: torch.optim.SGD's update (momentum, dampening, weight decay, Nesterov) over
// parameter groups, one fused kernel call per parameter; momentum buffers are fp32.
#pragma once

#include <map>
#include <memory>
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
  };
  struct ParamGroup {
    std::vector<Tensor> params;
    Options options;
  };

  SGD(std::vector<Tensor> params, const Options& options);
  void add_param_group(std::vector<Tensor> params, const Options& options);

  void step() override;

  std::vector<ParamGroup>& param_groups() { return groups_; }
  // Momentum buffers by parameter position ("<group>.<index>").
  std::map<std::string, Tensor> state_dict() const;

 private:
  std::vector<ParamGroup> groups_;
  std::map<const TensorImpl*, Tensor> momentum_;  // keyed by parameter identity
};

}  // namespace demi::optim

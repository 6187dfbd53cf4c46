// optim::Optimizer: what every optimizer shares: parameter lists, zero_grad, and the gradient
// targets the GradScaler unscales into (in place today; the fp32 master gradients of half
// parameters when masters land).
#pragma once

#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Drops every gradient (set_to_none, PyTorch's default since 2.0).
  void zero_grad();
  // Every parameter of every group, in order.
  std::vector<Tensor> parameters() const;

  // The gradients step() will read, each paired with where GradScaler::unscale_ writes its
  // unscaled value (the same tensor: unscaling is in place). Parameters without a gradient are left out.
  struct GradientTarget {
    Tensor grad;
    Tensor unscaled;
  };
  std::vector<GradientTarget> gradient_targets() const;

 protected:
  std::vector<std::vector<Tensor>> param_lists_;  // one per param group
  void add_params(std::vector<Tensor> params, const char* optimizer);
};

}  // namespace demi::optim

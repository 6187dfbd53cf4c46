// optim::Optimizer's shared bookkeeping.
#include "framework/optim/optimizer.h"

namespace demi::optim {

void Optimizer::add_params(std::vector<Tensor> params, const char* optimizer) {
  for (const Tensor& p : params) {
    DEMI_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), optimizer, ": parameters must be floating "
               "leaf tensors (model parameters), got ", p.defined() ? dtype_name(p.dtype()) : "an undefined tensor");
    for (const auto& list : param_lists_) {
      for (const Tensor& q : list) {
        DEMI_CHECK(!q.is_same(p), optimizer, ": a parameter appears in more than one param group");
      }
    }
  }
  param_lists_.push_back(std::move(params));
}

void Optimizer::zero_grad() {
  for (const auto& list : param_lists_) {
    for (const Tensor& p : list) p.set_grad(Tensor());
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& list : param_lists_) out.insert(out.end(), list.begin(), list.end());
  return out;
}

std::vector<Optimizer::GradientTarget> Optimizer::gradient_targets() const {
  std::vector<GradientTarget> out;
  for (const auto& list : param_lists_) {
    for (const Tensor& p : list) {
      const Tensor g = p.grad();
      if (g.defined()) out.push_back({g, g});
    }
  }
  return out;
}

}  // namespace demi::optim

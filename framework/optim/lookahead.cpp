// optim::Lookahead: the averaging step, written into the module's own tensors in place so that
// the optimizer (and anyone else holding them) sees the reset weights.
#include "framework/optim/lookahead.h"

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace demi::optim {

Lookahead::Lookahead(nn::Module& module, Optimizer* optimizer) : optimizer_(optimizer) {
  NoGradGuard no_grad;
  for (auto list : {module.named_parameters(), module.named_buffers()}) {
    for (auto& [name, t] : list) {
      if (!t.defined() || !is_floating(t.dtype())) continue;  // BatchNorm's batch counter is not averaged
      live_.emplace_back(name, t);
      average_.push_back(t.to(DType::F32).clone());
      average_.back().set_memory_category(MemoryCategory::OptimizerState);
    }
  }
}

void Lookahead::update(double decay) {
  DEMI_CHECK(decay >= 0.0 && decay <= 1.0, "Lookahead::update: decay must be in [0, 1], got ", decay);
  NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    const Tensor& live = live_[i].second;
    Tensor& average = average_[i];
    const Tensor next = average + (live.to(DType::F32) - average) * (1.0 - decay);
    average.copy_(next);
    live.copy_(next);
    if (optimizer_) {
      const Tensor master = optimizer_->master_of(live);
      if (master.defined()) master.copy_(next);
    }
  }
}

StateDict Lookahead::state_dict() const {
  StateDict state;
  for (size_t i = 0; i < live_.size(); ++i) state[live_[i].first] = average_[i];
  return state;
}

void Lookahead::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    const auto it = state.find(live_[i].first);
    DEMI_CHECK(it != state.end(), "Lookahead::load_state_dict: no average for '", live_[i].first,
               "'; the state comes from a different model");
    DEMI_CHECK(it->second.shape() == average_[i].shape(), "Lookahead::load_state_dict: '", live_[i].first, "' has shape ",
               it->second.shape(), ", expected ", average_[i].shape());
    average_[i].copy_(it->second);
  }
}

}  // namespace demi::optim

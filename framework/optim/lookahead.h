// optim::Lookahead: airbench's "lookahead" weight averaging over a module's floating parameters
// and buffers (BatchNorm's running statistics included). Every few steps the average moves toward
// the live weights and the live weights are reset to it: a slow copy that the fast SGD weights
// keep returning to, which is what lets airbench's short, high-lr runs end in a flat minimum.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace demi::optim {

class Lookahead {
 public:
  // Snapshots the module's floating parameters and buffers (the average is kept in fp32). When
  // `optimizer` keeps fp32 masters of half parameters, update() resets those masters too, so that
  // its next step starts from the averaged weights and not from the stale master.
  explicit Lookahead(nn::Module& module, Optimizer* optimizer = nullptr);

  // average += (1 - decay) * (live - average); then live = average. decay 0 keeps the live weights
  // (and makes them the average); decay 1 restores the average (airbench's final sync).
  void update(double decay);

  // The averages by the module's dotted names (for checkpoints); load restores them (every name
  // must be present with the same shape).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  std::vector<std::pair<std::string, Tensor>> live_;
  std::vector<Tensor> average_;
  Optimizer* optimizer_;
};

}  // namespace demi::optim

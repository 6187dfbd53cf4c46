// optim::Optimizer: what every optimizer shares: parameter lists, zero_grad, fp32 master copies
// of half parameters, and the gradient targets the GradScaler unscales into.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::optim {

// What an optimizer does with a half (fp16/bf16) parameter.
enum class MasterWeights {
  Fp32,  // keep an fp32 master copy, step it, write the rounded value back (the default)
  None,  // step the half parameter directly (airbench-style; small updates round away: see docs)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Drops every gradient (set_to_none, PyTorch's default since 2.0).
  void zero_grad();
  // Every parameter of every group, in order.
  std::vector<Tensor> parameters() const;
  // The optimizer's state by parameter position ("<group>.<index>.<name>"), fp32 masters included;
  // load_state_dict restores it into an optimizer over the same parameters (unknown keys throw).
  virtual std::map<std::string, Tensor> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) = 0;
  // Learning rate of each param group (what schedulers drive).
  size_t num_groups() const { return slots_.size(); }
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // The fp32 master of a half parameter (undefined when it has none).
  Tensor master_of(const Tensor& param) const;

  // For GradScaler::unscale_: each gradient paired with where its unscaled value goes: the fp32
  // master gradient of a half parameter with a master (so a true gradient of 1e-8 survives), else
  // the gradient itself (in place). The next step() reads those targets.
  struct GradientTarget {
    Tensor grad;
    Tensor unscaled;
  };
  std::vector<GradientTarget> unscale_targets();

 protected:
  struct Slot {
    Tensor param;
    Tensor master;       // fp32 copy of a half param (undefined otherwise)
    Tensor master_grad;  // fp32 unscaled gradient, written by unscale_targets() users
  };
  // Registers a group's parameters (creating masters per policy); returns the group's index.
  size_t add_params(const std::vector<Tensor>& params, MasterWeights policy, const char* optimizer);
  // The gradient step() should read for a slot (undefined: no gradient, skip the parameter).
  Tensor step_gradient(const Slot& slot) const;
  // Calls fn(group, index, slot, grad) for every parameter that has a gradient to step with.
  template <typename Fn> void for_each_gradient(Fn&& fn) const {
    for (size_t g = 0; g < slots_.size(); ++g) {
      for (size_t i = 0; i < slots_[g].size(); ++i) {
        const Tensor grad = step_gradient(slots_[g][i]);
        if (grad.defined()) fn(g, i, slots_[g][i], grad);
      }
    }
  }
  // The key prefix of slot i of group g in state dicts: "<g>.<i>.".
  static std::string state_key(size_t group, size_t index);
  // Adds each master as "<g>.<i>.master"; loads them back (shape-checked). load returns how many
  // keys of `state` it used, so callers can reject unexpected keys.
  void save_masters(std::map<std::string, Tensor>& state) const;
  size_t load_masters(const std::map<std::string, Tensor>& state);
  // Loads one state tensor of a slot: copies `key` from `state` into a new tensor shaped like the
  // parameter, in `dtype` on its device (undefined when the key is absent).
  Tensor load_state_tensor(const std::map<std::string, Tensor>& state, const std::string& key, const Slot& slot,
                           DType dtype, const char* optimizer) const;
  // Marks the end of a step: the next one reads gradients directly again.
  void finish_step() { unscaled_into_masters_ = false; }

  std::vector<std::vector<Slot>> slots_;  // one list per param group

 private:
  bool unscaled_into_masters_ = false;
};

}  // namespace demi::optim

// optim::Optimizer: what every optimizer shares: parameter lists, zero_grad, fp32 master copies
// of half parameters, and the gradient targets the GradScaler unscales into.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi::optim {

// What an optimizer does with a half (fp16/bf16) parameter.
enum class MasterWeights {
  Fp32,  // keep an fp32 master copy, step it, write the rounded value back (the default)
  None,  // step the half parameter directly (airbench-style; small updates round away: see docs)
};

// How a step writes a half parameter: to nearest, or stochastically (unbiased: an update far below
// half an ulp moves the weight with the right probability, so bf16 weights train without masters;
// backends/kernels.h). The random stream is seeded per parameter and saved with the state.
using Rounding = backend::Rounding;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // step(), unless found_inf (a one-element float32 tensor on the parameters' device, GradScaler's)
  // is nonzero. SGD and AdamW decide it on the device, as PyTorch's fused optimizers take
  // found_inf: the host never reads the flag, so a GPU step need not wait for its kernels. Other
  // optimizers read it (one host read) and call step(). GradScaler::step calls this.
  virtual void step_unless(const Tensor& found_inf);
  // Whether step_unless decides on the device.
  virtual bool skips_on_device() const { return false; }
  // Drops every gradient (set_to_none, PyTorch's default since 2.0).
  void zero_grad();
  // Every parameter of every group, in order.
  std::vector<Tensor> parameters() const;
  // The optimizer's state by parameter position ("<group>.<index>.<name>"), in parameter order,
  // each parameter's state (slot_state) then its fp32 master; load_state_dict restores it into an
  // optimizer over the same parameters (unknown keys throw).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // Learning rate of each param group (what schedulers drive).
  size_t num_groups() const { return slots_.size(); }
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // The momentum a schedule may cycle (OneCycle): PyTorch's group["momentum"] (SGD, Muon), or
  // betas[0] for AdamW. Optimizers without one answer false and refuse set_momentum.
  virtual bool has_momentum() const { return false; }
  virtual double momentum(size_t group) const;
  virtual void set_momentum(size_t group, double momentum);
  // The fp32 master of a half parameter (undefined when it has none).
  Tensor master_of(const Tensor& param) const;

  // PyTorch's `capturable`: each group's learning rate also lives in a one-element float64 tensor
  // on the parameters' device, which the step kernels read, so that a captured CUDA graph steps
  // with the rate a scheduler set before each replay (training::TrainStep's cuda_graph turns it
  // on). Results are bit-identical either way. SGD and AdamW support it; the others refuse it.
  virtual bool supports_capturable() const { return false; }
  void set_capturable(bool capturable);
  bool capturable() const { return capturable_; }
  // Writes each group's lr() into its device tensor where it changed (one fill per such group).
  // Outside a capture only: a capture would freeze the value into the graph. Steps call it too.
  void sync_device_lr();
  // The values other than lr that a step hands its kernels by value (momentum, betas, weight
  // decay ... of every group): a captured step freezes them, so TrainStep captures again when
  // they change (a schedule that cycles momentum).
  virtual std::vector<double> step_constants() const { return {}; }

  // For GradScaler::unscale_: each gradient paired with where its unscaled value goes: the fp32
  // master gradient of a half parameter with a master (so a true gradient of 1e-8 survives), else
  // the gradient itself (in place). The next step() reads those targets.
  struct GradientTarget {
    Tensor param;
    Tensor grad;
    Tensor unscaled;
  };
  std::vector<GradientTarget> unscale_targets();
  // After the unscale kernel has filled the targets: each parameter's .grad becomes its unscaled
  // target, so that whatever reads p.grad() next (nn::clip_grad_norm_, a norm in telemetry, the
  // step) sees and changes the true gradient the step uses, as after PyTorch's unscale_. For a half
  // parameter with an fp32 master that is the fp32 master gradient: p.grad() is then fp32.
  void adopt_unscaled(const std::vector<GradientTarget>& targets);

 protected:
  struct Slot {
    Tensor param;
    Tensor master;       // fp32 copy of a half param (undefined otherwise)
    Tensor master_grad;  // fp32 unscaled gradient, written by unscale_targets() users
    int64_t rounding_steps = 0;  // stochastic writes so far: the position in its random stream
  };
  // Registers a group's parameters (creating masters per policy); returns the group's index.
  size_t add_params(const std::vector<Tensor>& params, MasterWeights policy, const char* optimizer);
  // The gradient step() should read for a slot: p.grad(), which after GradScaler::unscale_ is the
  // slot's fp32 master gradient for a half parameter with a master (undefined: skip the parameter).
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
  // Throws unless found_inf (when defined) is a one-element F32 on param's device.
  static void check_found_inf(const Tensor& found_inf, const Tensor& param);
  // The key prefix of slot i of group g in state dicts: "<g>.<i>.".
  static std::string state_key(size_t group, size_t index);
  // The named state tensors of slot i of group g (momentum_buffer; exp_avg, exp_avg_sq, step ...),
  // without the master, which state_dict() adds; empty before the parameter's first step.
  virtual std::vector<std::pair<std::string, Tensor>> slot_state(size_t group, size_t index) const = 0;
  // Restores slot i of group g from its saved state by name (the names slot_state gave), taking
  // (erasing) each name it uses; load_state_dict refuses whatever is left.
  virtual void load_slot_state(size_t group, size_t index, std::map<std::string, Tensor>& named) = 0;
  // The tensor `name` of `named` (erased from it), shape-checked against the slot's parameter and
  // converted to `dtype` on its device; undefined when absent.
  Tensor take_state(std::map<std::string, Tensor>& named, const std::string& name, const Slot& slot, DType dtype) const;
  // How step writes slot i of group g: `mode` for a half param (with its own seed, mixed from
  // `seed`, g and i, and its stream position, advanced here), to nearest for fp32 / fp64 ones.
  backend::WriteRounding write_rounding(size_t group, size_t index, Rounding mode, uint64_t seed);

  // The rate tensor of group g for `param`'s device (synced first), undefined unless capturable.
  Tensor device_lr(size_t group, const Tensor& param);

  std::vector<std::vector<Slot>> slots_;  // one list per param group

 private:
  bool capturable_ = false;
  struct DeviceLr {
    Tensor value;        // 0-d F64 on the group's device
    double written = 0;  // what the last fill wrote
  };
  std::vector<DeviceLr> device_lr_;  // by group, while capturable
};

}  // namespace demi::optim

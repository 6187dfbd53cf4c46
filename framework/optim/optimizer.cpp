// optim::Optimizer's shared bookkeeping: parameter slots, masters and unscale targets.
#include "framework/optim/optimizer.h"

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::optim {

size_t Optimizer::add_params(const std::vector<Tensor>& params, MasterWeights policy, const char* optimizer) {
  std::vector<Slot> slots;
  for (const Tensor& p : params) {
    DEMI_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), optimizer, ": parameters must be floating "
               "leaf tensors (model parameters), got ", p.defined() ? dtype_name(p.dtype()) : "an undefined tensor");
    for (const auto& group : slots_) {
      for (const Slot& s : group) {
        DEMI_CHECK(!s.param.is_same(p), optimizer, ": a parameter appears in more than one param group");
      }
    }
    Slot slot{p, Tensor(), Tensor()};
    if (is_half(p.dtype()) && policy == MasterWeights::Fp32) {
      NoGradGuard no_grad;
      slot.master = p.detach().to(DType::F32);
      slot.master.set_memory_category(MemoryCategory::MasterWeights);
    }
    slots.push_back(slot);
  }
  slots_.push_back(std::move(slots));
  return slots_.size() - 1;
}

void Optimizer::zero_grad() {
  for (const auto& group : slots_) {
    for (const Slot& s : group) s.param.set_grad(Tensor());
  }
  unscaled_into_masters_ = false;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& group : slots_) {
    for (const Slot& s : group) out.push_back(s.param);
  }
  return out;
}

Tensor Optimizer::master_of(const Tensor& param) const {
  for (const auto& group : slots_) {
    for (const Slot& s : group) {
      if (s.param.is_same(param)) return s.master;
    }
  }
  return Tensor();
}

std::vector<Optimizer::GradientTarget> Optimizer::unscale_targets() {
  std::vector<GradientTarget> out;
  for (auto& group : slots_) {
    for (Slot& s : group) {
      const Tensor g = s.param.grad();
      if (!g.defined()) continue;
      if (s.master.defined()) {
        if (!s.master_grad.defined()) {
          s.master_grad = empty(s.master.shape(), DType::F32, s.master.device());
          s.master_grad.set_memory_category(MemoryCategory::Gradients);
        }
        out.push_back({g, s.master_grad});
      } else {
        out.push_back({g, g});
      }
    }
  }
  unscaled_into_masters_ = true;
  return out;
}

Tensor Optimizer::step_gradient(const Slot& slot) const {
  const Tensor g = slot.param.grad();
  if (!g.defined()) return g;
  if (unscaled_into_masters_ && slot.master.defined()) return slot.master_grad;
  DEMI_CHECK(g.dtype() == slot.param.dtype(), "optimizer: the gradient is ", g.dtype(), " but its parameter is ",
             slot.param.dtype(), "; gradients must have their parameter's dtype");
  return g;
}

}  // namespace demi::optim

// optim::AdamW: checks, moment state and the per-parameter kernel call.
#include "framework/optim/adamw.h"

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::optim {

AdamW::AdamW(const std::vector<Tensor>& params, const Options& options) { add_param_group(params, options); }

void AdamW::add_param_group(const std::vector<Tensor>& params, const Options& o) {
  DEMI_CHECK(o.lr >= 0.0 && o.eps >= 0.0 && o.weight_decay >= 0.0, "AdamW: lr, eps and weight_decay must be >= 0, got ",
             o.lr, ", ", o.eps, ", ", o.weight_decay);
  DEMI_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0, "AdamW: betas must be in [0, 1), got (",
             o.beta1, ", ", o.beta2, ")");
  add_params(params, o.master_weights, "AdamW");
  options_.push_back(o);
  state_.emplace_back(params.size());
}

void AdamW::step_unless(const Tensor& found_inf) {
  NoGradGuard no_grad;
  for_each_gradient([&](size_t g, size_t i, const Slot& slot, const Tensor& grad) {
    const Options& o = options_[g];
    State& s = state_[g][i];
    if (!s.exp_avg.defined()) {
      const DType dtype = slot.param.dtype() == DType::F64 ? DType::F64 : DType::F32;
      s.exp_avg = zeros(slot.param.shape(), dtype, slot.param.device());
      s.exp_avg_sq = zeros(slot.param.shape(), dtype, slot.param.device());
      s.exp_avg.set_memory_category(MemoryCategory::OptimizerState);
      s.exp_avg_sq.set_memory_category(MemoryCategory::OptimizerState);
      s.step = zeros({}, DType::I64, slot.param.device());
    }
    check_found_inf(found_inf, slot.param);
    backend::AdamWArgs args;
    if (found_inf.defined()) args.found_inf = found_inf.ref();
    args.step_count = s.step.ref();
    args.param = slot.param.storage_ref();  // the others in its memory format
    args.grad = detail::storage_ref_like(grad, slot.param);
    args.exp_avg = detail::storage_ref_like(s.exp_avg, slot.param);
    args.exp_avg_sq = detail::storage_ref_like(s.exp_avg_sq, slot.param);
    if (slot.master.defined()) args.master = detail::storage_ref_like(slot.master, slot.param);
    args.lr = o.lr;
    const Tensor lr = device_lr(g, slot.param);
    if (lr.defined()) args.lr_tensor = lr.ref();
    args.beta1 = o.beta1;
    args.beta2 = o.beta2;
    args.eps = o.eps;
    args.weight_decay = o.weight_decay;
    args.rounding = write_rounding(g, i, o.rounding, o.rounding_seed);
    kernels(slot.param).adamw_step(args);
  });
}

std::vector<double> AdamW::step_constants() const {
  std::vector<double> out;
  for (const Options& o : options_) out.insert(out.end(), {o.beta1, o.beta2, o.eps, o.weight_decay});
  return out;
}

std::vector<std::pair<std::string, Tensor>> AdamW::slot_state(size_t g, size_t i) const {
  const State& s = state_[g][i];
  if (!s.exp_avg.defined()) return {};
  return {{"exp_avg", s.exp_avg}, {"exp_avg_sq", s.exp_avg_sq}, {"step", s.step}};
}

void AdamW::load_slot_state(size_t g, size_t i, std::map<std::string, Tensor>& named) {
  const Slot& slot = slots_[g][i];
  const DType dtype = slot.param.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const bool has_step = named.count("step") > 0;
  const Tensor step = has_step ? named.at("step") : Tensor();
  named.erase("step");
  Tensor m = take_state(named, "exp_avg", slot, dtype);
  Tensor v = take_state(named, "exp_avg_sq", slot, dtype);
  if (!m.defined() && !v.defined() && !has_step) return;
  DEMI_CHECK(m.defined() && v.defined() && has_step, "AdamW::load_state_dict: parameter ", state_key(g, i),
             " needs exp_avg, exp_avg_sq and step together");
  DEMI_CHECK(step.numel() == 1, "AdamW::load_state_dict: parameter ", state_key(g, i), "'s step must be one number, got ",
             step.shape());
  state_[g][i] = State{m, v, step.to(DType::I64).to(slot.param.device()).reshape({}).clone()};
}

}  // namespace demi::optim

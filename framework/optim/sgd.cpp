// optim::SGD: its groups, and the shared SGD update (sgd_update.h) for each parameter.
#include "framework/optim/sgd.h"

#include "framework/autograd/grad_mode.h"

namespace demi::optim {

SGD::SGD(const std::vector<Tensor>& params, const Options& options) { add_param_group(params, options); }

void SGD::add_param_group(const std::vector<Tensor>& params, const Options& o) {
  check_sgd_options(o);
  add_params(params, o.master_weights, "SGD");
  options_.push_back(o);
  momentum_.add_group(params.size());
}

void SGD::step_unless(const Tensor& found_inf) {
  NoGradGuard no_grad;
  for_each_gradient([&](size_t g, size_t i, const Slot& slot, const Tensor& grad) {
    const Options& o = options_[g];
    check_found_inf(found_inf, slot.param);
    sgd_update(o, slot.param, slot.master, grad, momentum_, g, i, write_rounding(g, i, o.rounding, o.rounding_seed),
               found_inf, device_lr(g, slot.param));
  });
}

std::vector<double> SGD::step_constants() const {
  std::vector<double> out;
  for (const Options& o : options_) {
    out.insert(out.end(), {o.momentum, o.dampening, o.weight_decay, o.nesterov ? 1.0 : 0.0});
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> SGD::slot_state(size_t g, size_t i) const { return momentum_.state(g, i); }

void SGD::load_slot_state(size_t g, size_t i, std::map<std::string, Tensor>& named) {
  const Slot& slot = slots_[g][i];
  momentum_.restore(g, i, take_state(named, "momentum_buffer", slot, MomentumBuffers::dtype_for(slot.param)));
}

}  // namespace demi::optim

// optim::SGD: checks, momentum-buffer state and the per-parameter kernel call.
#include "framework/optim/sgd.h"

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::optim {

SGD::SGD(const std::vector<Tensor>& params, const Options& options) { add_param_group(params, options); }

void SGD::add_param_group(const std::vector<Tensor>& params, const Options& o) {
  DEMI_CHECK(o.lr >= 0.0, "SGD: learning rate must be >= 0, got ", o.lr);
  DEMI_CHECK(o.momentum >= 0.0, "SGD: momentum must be >= 0, got ", o.momentum);
  DEMI_CHECK(o.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  DEMI_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "SGD: Nesterov momentum requires momentum > 0 and dampening = 0");
  add_params(params, o.master_weights, "SGD");
  options_.push_back(o);
  momentum_.emplace_back(params.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  for_each_gradient([&](size_t g, size_t i, const Slot& slot, const Tensor& grad) { sgd_update(g, i, slot, grad); });
}

Tensor& SGD::momentum_buffer(size_t g, size_t i, bool* created) {
  Tensor& buffer = momentum_[g][i];
  if (created) *created = !buffer.defined();
  if (!buffer.defined()) {
    const Tensor& p = slots_[g][i].param;
    buffer = zeros(p.shape(), p.dtype() == DType::F64 ? DType::F64 : DType::F32, p.device());
    buffer.set_memory_category(MemoryCategory::OptimizerState);
  }
  return buffer;
}

void SGD::sgd_update(size_t g, size_t i, const Slot& slot, const Tensor& grad) {
  const Options& o = options_[g];
  backend::SgdArgs args;
  args.param = slot.param.ref();
  args.grad = grad.ref();
  if (slot.master.defined()) args.master = slot.master.ref();
  args.lr = o.lr;
  args.momentum = o.momentum;
  args.dampening = o.dampening;
  args.weight_decay = o.weight_decay;
  args.nesterov = o.nesterov;
  args.rounding = write_rounding(g, i, o.rounding, o.rounding_seed);
  if (o.momentum != 0.0) {
    bool created = false;
    args.momentum_buffer = momentum_buffer(g, i, &created).ref();
    args.first_step = created;
  }
  kernels(slot.param).sgd_step(args);
}

std::vector<std::pair<std::string, Tensor>> SGD::slot_state(size_t g, size_t i) const {
  if (!momentum_[g][i].defined()) return {};
  return {{"momentum_buffer", momentum_[g][i]}};
}

void SGD::load_slot_state(size_t g, size_t i, std::map<std::string, Tensor>& named) {
  const DType dtype = slots_[g][i].param.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor buffer = take_state(named, "momentum_buffer", slots_[g][i], dtype);
  if (buffer.defined()) momentum_[g][i] = buffer;
}

}  // namespace demi::optim

// The SGD update shared by optim::SGD and optim::Muon: option checks, momentum buffers and the
// per-parameter kernel call.
#include "framework/optim/sgd_update.h"

#include "framework/tensor/factories.h"

namespace demi::optim {

void check_sgd_options(const SgdOptions& o) {
  DEMI_CHECK(o.lr >= 0.0, "SGD: learning rate must be >= 0, got ", o.lr);
  DEMI_CHECK(o.momentum >= 0.0, "SGD: momentum must be >= 0, got ", o.momentum);
  DEMI_CHECK(o.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  DEMI_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "SGD: Nesterov momentum requires momentum > 0 and dampening = 0");
}

Tensor& MomentumBuffers::at(size_t g, size_t i, const Tensor& param, bool* created) {
  Tensor& buffer = buffers_.at(g).at(i);
  if (created) *created = !buffer.defined();
  if (!buffer.defined()) {
    buffer = zeros(param.shape(), dtype_for(param), param.device());
    buffer.set_memory_category(MemoryCategory::OptimizerState);
  }
  return buffer;
}

std::vector<std::pair<std::string, Tensor>> MomentumBuffers::state(size_t g, size_t i) const {
  const Tensor& buffer = buffers_.at(g).at(i);
  if (!buffer.defined()) return {};
  return {{"momentum_buffer", buffer}};
}

void MomentumBuffers::restore(size_t g, size_t i, const Tensor& buffer) {
  if (buffer.defined()) buffers_.at(g).at(i) = buffer;
}

void sgd_update(const SgdOptions& o, const Tensor& param, const Tensor& master, const Tensor& grad,
                MomentumBuffers& momentum, size_t g, size_t i, const backend::WriteRounding& rounding,
                const Tensor& found_inf, const Tensor& lr_tensor) {
  backend::SgdArgs args;
  if (found_inf.defined()) args.found_inf = found_inf.ref();
  if (lr_tensor.defined()) args.lr_tensor = lr_tensor.ref();
  args.param = param.storage_ref();  // the others in its memory format
  args.grad = detail::storage_ref_like(grad, param);
  if (master.defined()) args.master = detail::storage_ref_like(master, param);
  args.lr = o.lr;
  args.momentum = o.momentum;
  args.dampening = o.dampening;
  args.weight_decay = o.weight_decay;
  args.nesterov = o.nesterov;
  args.rounding = rounding;
  if (o.momentum != 0.0) {
    bool created = false;
    args.momentum_buffer = detail::storage_ref_like(momentum.at(g, i, param, &created), param);
    args.first_step = created;
  }
  kernels(param).sgd_step(args);
}

}  // namespace demi::optim

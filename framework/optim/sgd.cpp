// optim::SGD: checks, momentum-buffer state and the per-parameter kernel call.
#include "framework/optim/sgd.h"

#include <string>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::optim {

SGD::SGD(std::vector<Tensor> params, const Options& options) { add_param_group(std::move(params), options); }

void SGD::add_param_group(std::vector<Tensor> params, const Options& o) {
  DEMI_CHECK(o.lr >= 0.0, "SGD: learning rate must be >= 0, got ", o.lr);
  DEMI_CHECK(o.momentum >= 0.0, "SGD: momentum must be >= 0, got ", o.momentum);
  DEMI_CHECK(o.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  DEMI_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "SGD: Nesterov momentum requires momentum > 0 and dampening = 0");
  add_params(params, "SGD");
  groups_.push_back(ParamGroup{std::move(params), o});
}

void SGD::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    const Options& o = group.options;
    for (const Tensor& p : group.params) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      DEMI_CHECK(grad.dtype() == p.dtype(), "SGD: gradient is ", grad.dtype(), " but the parameter is ",
                 p.dtype(), "; gradients must have their parameter's dtype");
      backend::SgdArgs args;
      args.param = p.ref();
      args.grad = grad.ref();
      args.lr = o.lr;
      args.momentum = o.momentum;
      args.dampening = o.dampening;
      args.weight_decay = o.weight_decay;
      args.nesterov = o.nesterov;
      if (o.momentum != 0.0) {
        Tensor& buffer = momentum_[p.impl().get()];
        args.first_step = !buffer.defined();
        if (!buffer.defined()) buffer = empty(p.shape(), p.dtype() == DType::F64 ? DType::F64 : DType::F32, p.device());
        args.momentum_buffer = buffer.ref();
      }
      kernels(p).sgd_step(args);
    }
  }
}

std::map<std::string, Tensor> SGD::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      auto it = momentum_.find(groups_[g].params[i].impl().get());
      if (it != momentum_.end()) out.emplace(std::to_string(g) + "." + std::to_string(i), it->second);
    }
  }
  return out;
}

}  // namespace demi::optim

// Module bookkeeping: registration, recursive traversal, dtype/device moves, state_dict.
#include "framework/nn/module.h"

#include "framework/autograd/grad_mode.h"

namespace demi::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  if (t.defined() && !t.requires_grad()) t.requires_grad_();
  if (t.defined()) t.set_memory_category(MemoryCategory::Parameters);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  if (t.defined()) t.set_memory_category(MemoryCategory::Parameters);  // running statistics: model state
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) {
    if (t.defined()) out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}
std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}
std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

Module& Module::train(bool on) {
  apply([on](Module& m) { m.training_ = on; });
  return *this;
}

void Module::assign_(const Tensor& slot, const Tensor& value) {
  // Swap storage, shape and dtype under the same TensorImpl so that every holder of this tensor
  // (an optimizer, a user's handle) sees the new value.
  TensorImpl& impl = slot.impl_ref();
  const TensorImpl& src = value.impl_ref();
  impl.storage = src.storage;
  impl.offset = src.offset;
  impl.shape = src.shape;
  impl.dtype = src.dtype;
  impl.memory_format = src.memory_format;
  impl.grad = Tensor();
  slot.set_memory_category(MemoryCategory::Parameters);
}

Module& Module::to(DType dtype) {
  DEMI_CHECK(is_floating(dtype), "Module::to: target dtype must be floating, got ", dtype);
  NoGradGuard no_grad;
  for (auto& [name, t] : params_) {
    if (t.defined() && is_floating(t.dtype())) assign_(t, t.to(dtype));
  }
  for (auto& [name, t] : buffers_) {
    if (t.defined() && is_floating(t.dtype())) assign_(t, t.to(dtype));
  }
  for (auto& [name, child] : children_) child->to(dtype);
  return *this;
}

Module& Module::to(const Device& device) {
  NoGradGuard no_grad;
  apply([&device](Module& m) {
    for (auto* tensors : {&m.params_, &m.buffers_}) {
      for (auto& [name, t] : *tensors) {
        if (t.defined()) assign_(t, t.to(device));
      }
    }
  });
  return *this;
}

Module& Module::to(MemoryFormat format) {
  DEMI_CHECK(format != MemoryFormat::Preserve, "Module::to: preserve_format changes nothing; ask for "
             "MemoryFormat::ChannelsLast or MemoryFormat::Contiguous");
  NoGradGuard no_grad;
  apply([format](Module& m) {
    for (auto* tensors : {&m.params_, &m.buffers_}) {
      for (auto& [name, t] : *tensors) {
        if (!t.defined() || t.dim() != 4 || t.is_contiguous(format)) continue;
        const Tensor grad = t.grad();
        assign_(t, t.contiguous(format));
        if (grad.defined()) {
          t.set_grad(grad.contiguous(format));
          t.grad().set_memory_category(MemoryCategory::Gradients);
        }
      }
    }
  });
  return *this;
}

void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [name, t] : params_) {
    if (t.defined()) out.emplace(prefix + name, t);
  }
  for (const auto& [name, t] : buffers_) {
    if (t.defined()) out.emplace(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

StateDict Module::state_dict() const {
  StateDict out;
  collect_state("", out);
  return out;
}

void Module::load_state_dict(const StateDict& state) {
  const StateDict own = state_dict();
  for (const auto& [name, t] : state) {
    DEMI_CHECK(own.count(name), "load_state_dict: unexpected key '", name, "' (the module has no such "
               "parameter or buffer)");
  }
  NoGradGuard no_grad;
  for (const auto& [name, slot] : own) {
    auto it = state.find(name);
    DEMI_CHECK(it != state.end(), "load_state_dict: missing key '", name, "' of shape ", slot.shape());
    DEMI_CHECK(it->second.shape() == slot.shape(), "load_state_dict: '", name, "' has shape ", it->second.shape(),
               " in the state but ", slot.shape(), " in the module");
    // Keep the module's dtype, device and memory format; values are converted on the way in.
    const Tensor value = it->second.to(slot.dtype()).to(slot.device());
    const MemoryFormat format = slot.suggest_memory_format();
    assign_(slot, value.is_contiguous(format) ? value.clone() : value.contiguous(format));
  }
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  DEMI_CHECK(module != nullptr, "Module::replace_child: the new module for '", name, "' is null");
  for (auto& child : children_) {
    if (child.first == name) {
      child.second = std::move(module);
      return;
    }
  }
  DEMI_CHECK(false, "Module::replace_child: there is no child named '", name, "'");
}

}  // namespace demi::nn

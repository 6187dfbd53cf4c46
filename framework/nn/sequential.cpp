// nn::Sequential's forward, which fuses a BatchNorm2d and the ReLU or GELU after it.
#include "framework/nn/sequential.h"

#include <typeinfo>

#include "framework/core/error.h"
#include "framework/nn/activation.h"
#include "framework/nn/batch_norm2d.h"

namespace demi::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < children_.size(); ++i) {
    Module& module = *children_[i].second;
    const Module* next = i + 1 < children_.size() ? children_[i + 1].second.get() : nullptr;
    if (next && typeid(module) == typeid(BatchNorm2d) && (typeid(*next) == typeid(ReLU) || typeid(*next) == typeid(GELU))) {
      auto& bn = static_cast<BatchNorm2d&>(module);
      y = typeid(*next) == typeid(ReLU) ? bn.forward_relu(y) : bn.forward_gelu(y);
      ++i;
      continue;
    }
    y = module.forward(y);
  }
  return y;
}

void Sequential::check_child_name(const std::string& name) const {
  DEMI_CHECK(!name.empty() && name.find('.') == std::string::npos, "Sequential::add: module name '", name,
             "' must be non-empty and contain no '.' (state_dict joins names with dots)");
  for (const auto& [taken, child] : children_) {
    DEMI_CHECK(taken != name, "Sequential::add: there is already a module named '", name, "'; give each its own name");
  }
}

}  // namespace demi::nn

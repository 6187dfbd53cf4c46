// nn::Sequential's forward, which fuses a BatchNorm2d and the ReLU or GELU after it and may
// checkpoint blocks of children, and checkpoint_sequential.
#include "framework/nn/sequential.h"

#include <typeinfo>

#include "framework/autograd/checkpoint.h"
#include "framework/core/error.h"
#include "framework/nn/activation.h"
#include "framework/nn/batch_norm2d.h"

namespace demi::nn {

Tensor Sequential::forward(const Tensor& x) {
  if (block_starts_.empty()) return forward_range(0, children_.size(), x);
  Tensor y = forward_range(0, block_starts_[0], x);
  for (size_t k = 0; k < block_starts_.size(); ++k) {
    const size_t begin = block_starts_[k];
    const size_t end = k + 1 < block_starts_.size() ? block_starts_[k + 1] : children_.size();
    y = checkpoint([this, begin, end](const Tensor& in) { return forward_range(begin, end, in); }, y);
  }
  return y;
}

Tensor Sequential::forward_range(size_t begin, size_t end, const Tensor& x) {
  DEMI_CHECK(begin <= end && end <= children_.size(), "Sequential::forward_range: [", begin, ", ", end,
             ") is not a range of its ", children_.size(), " children");
  Tensor y = x;
  for (size_t i = begin; i < end; ++i) {
    Module& module = *children_[i].second;
    const Module* next = i + 1 < end ? children_[i + 1].second.get() : nullptr;
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

Sequential& Sequential::checkpoint_blocks(std::vector<size_t> block_starts) {
  for (size_t k = 0; k < block_starts.size(); ++k) {
    DEMI_CHECK(block_starts[k] < children_.size() && (k == 0 || block_starts[k] > block_starts[k - 1]),
               "Sequential::checkpoint_blocks: block starts must be increasing child indices below ", children_.size(),
               "; got ", block_starts[k], (k > 0 ? " after " + std::to_string(block_starts[k - 1]) : std::string()));
  }
  block_starts_ = std::move(block_starts);
  return *this;
}

Tensor checkpoint_sequential(Sequential& module, int64_t segments, const Tensor& x) {
  const auto n = static_cast<int64_t>(module.size());
  DEMI_CHECK(segments >= 1 && segments <= n, "checkpoint_sequential: segments must be between 1 and the ", n,
             " children of the Sequential, got ", segments);
  const size_t size = static_cast<size_t>(n / segments);
  Tensor y = x;
  size_t begin = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, begin += size) {
    y = checkpoint([&module, begin, size](const Tensor& in) { return module.forward_range(begin, begin + size, in); }, y);
  }
  return module.forward_range(begin, module.size(), y);
}

void Sequential::check_child_name(const std::string& name) const {
  DEMI_CHECK(!name.empty() && name.find('.') == std::string::npos, "Sequential::add: module name '", name,
             "' must be non-empty and contain no '.' (state_dict joins names with dots)");
  for (const auto& [taken, child] : children_) {
    DEMI_CHECK(taken != name, "Sequential::add: there is already a module named '", name, "'; give each its own name");
  }
}

}  // namespace demi::nn

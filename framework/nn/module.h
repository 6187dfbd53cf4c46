// nn::Module: parameters, buffers and submodules registered by name, train/eval, dtype/device
// moves and state_dict, as torch.nn.Module. The layers beside it (linear.h, conv2d.h,
// batch_norm2d.h, activation.h, pooling.h, sequential.h) derive from it.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // All parameters, depth first in registration order; named with dotted paths ("0.weight").
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // Puts `module` where the child `name` was (what dist::convert_sync_batch_norm does); a module
  // that also keeps the old child in a member of its own still calls that one.
  void replace_child(const std::string& name, std::shared_ptr<Module> module);

  // Training mode for this module and every submodule (batch_norm's statistics depend on it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Converts floating parameters and buffers in place (the tensors keep their identity, so an
  // optimizer built before still sees them). Buffers of normalisation layers keep fp32 when
  // converting to a half type: statistics stay fp32.
  virtual Module& to(DType dtype);
  Module& to(const Device& device);
  // Stores every 4-D parameter and buffer (convolution weights) in `format`, as PyTorch's
  // model.to(memory_format=torch.channels_last), with their .grad; the other tensors keep theirs.
  Module& to(MemoryFormat format);

  // Parameters and buffers by dotted name (values shared, not copied), in PyTorch's order: each
  // module's parameters, then its buffers, then its children's, in registration order.
  StateDict state_dict() const;
  // Copies values in; every key must match in shape, and none may be missing or unexpected.
  void load_state_dict(const StateDict& state);

  // Calls fn(module) on this module and all descendants.
  template <typename Fn> void apply(Fn&& fn) {
    fn(*this);
    for (auto& child : children_) child.second->apply(fn);
  }

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  // Replaces a tensor's contents in place (keeping identity): used by to() and load_state_dict.
  static void assign_(const Tensor& slot, const Tensor& value);

  // deques: layers keep references (Conv2d::weight) to their entries, which push_back must not move.
  std::deque<std::pair<std::string, Tensor>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;

 private:
  void collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_state(const std::string& prefix, StateDict& out) const;
};

}  // namespace demi::nn

// Sequential (modules applied in order, named "0", "1", ... or by name) and Flatten.
#pragma once

#include <memory>
#include <string>

#include "framework/nn/module.h"

namespace demi::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Appends a module named by its position; returns *this so calls chain.
  template <typename M> Sequential& add(std::shared_ptr<M> module) {
    return add(std::to_string(children_.size()), std::move(module));
  }
  // Appends a module under `name`, as PyTorch's Sequential(OrderedDict(...)) and add_module: its
  // parameters are then "name.weight" in state_dict.
  template <typename M> Sequential& add(const std::string& name, std::shared_ptr<M> module) {
    check_child_name(name);
    register_module(name, std::move(module));
    return *this;
  }
  template <typename M, typename... Args> Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }
  // A BatchNorm2d directly followed by a ReLU or a GELU (exactly those classes, not subclasses such
  // as SyncBatchNorm) runs as BatchNorm2d::forward_relu / forward_gelu: the same values, one op
  // instead of two.
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children_.size(); }
  Module& operator[](size_t i) { return *children_.at(i).second; }

 private:
  // A name state_dict can carry: not empty, no '.', not taken.
  void check_child_name(const std::string& name) const;
};

// Flattens dims [start_dim, end_dim] (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }

 private:
  int64_t start_, end_;
};

}  // namespace demi::nn

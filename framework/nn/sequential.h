// Sequential (modules applied in order, named "0", "1", ... or by name, optionally checkpointed
// by blocks), checkpoint_sequential, and Flatten.
#pragma once

#include <memory>
#include <string>
#include <vector>

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

  // Children [begin, end) in order, fused as forward() fuses them.
  Tensor forward_range(size_t begin, size_t end, const Tensor& x);
  // Activation checkpointing by blocks: from now on forward() runs each block of children, from
  // one of `block_starts` (increasing) up to the next one or the end, under demi::checkpoint; the
  // children before the first start run plainly. Their saved activations are then the blocks'
  // inputs, and backward reruns one block at a time. The Sequential must outlive the backward pass.
  // An empty list turns checkpointing off (the default).
  Sequential& checkpoint_blocks(std::vector<size_t> block_starts);
  const std::vector<size_t>& checkpointed_blocks() const { return block_starts_; }

 private:
  // A name state_dict can carry: not empty, no '.', not taken.
  void check_child_name(const std::string& name) const;

  std::vector<size_t> block_starts_;
};

// torch.utils.checkpoint.checkpoint_sequential: splits `module`'s children into `segments` runs of
// size() / segments children (the last run takes the rest) and runs all but the last under
// demi::checkpoint; the last runs plainly, as its activations are needed at once in backward.
// 1 <= segments <= module.size().
Tensor checkpoint_sequential(Sequential& module, int64_t segments, const Tensor& x);

// Flattens dims [start_dim, end_dim] (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }

 private:
  int64_t start_, end_;
};

}  // namespace demi::nn

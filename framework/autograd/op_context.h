// OpContext: what one op's forward leaves for its backward (saved tensors, attributes) and which
// inputs need a gradient. The storages it saves are counted (once each, across all graphs) so
// activation memory is measured, not assumed. Inside a checkpointed function (checkpoint.h) it
// keeps placeholders instead, resolved in backward by rerunning the function.
#pragma once

#include <any>
#include <memory>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::autograd {

namespace detail {
class CheckpointFrame;
}

class OpContext {
 public:
  OpContext(const char* op_name, std::vector<bool> needs_grad, bool recording)
      : op_name_(op_name), needs_grad_(std::move(needs_grad)), recording_(recording) {}
  ~OpContext() { release(); }
  OpContext(OpContext&& other) noexcept;
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;
  OpContext& operator=(OpContext&&) = delete;

  // Keeps t for backward (a no-op when the op is not recorded, so nothing is held). Every tensor an
  // op's backward reads must come through here (not through attrs or a capture): activation
  // checkpointing keeps a placeholder instead, and only saved() brings the tensor back.
  void save(const Tensor& t);
  // Tensor i saved by forward; a placeholder is resolved first (the checkpoint reruns its function).
  const Tensor& saved(size_t i);
  // Whether tensor input i (counting tensor arguments only, in order) needs a gradient.
  bool needs_grad(size_t i) const { return i < needs_grad_.size() && needs_grad_[i]; }
  bool recording() const { return recording_; }

  // Non-tensor state for backward (shapes, options): one value of any copyable type.
  template <typename T> void set_attrs(T value) { attrs_ = std::move(value); }
  template <typename T> const T& attrs() const { return std::any_cast<const T&>(attrs_); }

  void release();

 private:
  const char* op_name_;
  std::vector<bool> needs_grad_;
  bool recording_;
  // One saved tensor, or the placeholder of one that a checkpoint will recompute.
  struct Slot {
    Tensor tensor;
    uint64_t version = 0;                             // its storage's version when saved
    std::shared_ptr<detail::CheckpointFrame> frame;   // set while the tensor waits to be recomputed
    size_t index = 0;                                 // its place among the tensors saved inside the frame
  };
  void keep(Slot& slot, const Tensor& t, bool counted);

  bool released_ = false;
  std::vector<Slot> saved_;
  std::vector<std::shared_ptr<Storage>> counted_;  // storages this context added to the saved-bytes count
  std::any attrs_;
};

namespace detail {
// Whether saving t adds to the saved-bytes count: not for undefined tensors nor for parameters
// (leaves that require grad), which live anyway.
bool counts_as_saved(const Tensor& t);
// Adds t's storage to the saved-bytes count and returns it (null for an undefined t); uncount_saved
// takes it off again.
std::shared_ptr<Storage> count_saved(const Tensor& t);
void uncount_saved(const std::shared_ptr<Storage>& storage);
}  // namespace detail

}  // namespace demi::autograd

// OpContext: what one op's forward leaves for its backward (saved tensors, attributes) and which
// inputs need a gradient. The storages it saves are counted (once each, across all graphs) so
// activation memory is measured, not assumed.
#pragma once

#include <any>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::autograd {

class OpContext {
 public:
  OpContext(const char* op_name, std::vector<bool> needs_grad, bool recording)
      : op_name_(op_name), needs_grad_(std::move(needs_grad)), recording_(recording) {}
  ~OpContext() { release(); }
  OpContext(OpContext&& other) noexcept;
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;
  OpContext& operator=(OpContext&&) = delete;

  // Keeps t for backward (a no-op when the op is not recorded, so nothing is held).
  void save(const Tensor& t);
  const Tensor& saved(size_t i) const;
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
  bool released_ = false;
  std::vector<Tensor> saved_;
  std::vector<uint64_t> saved_versions_;  // each saved storage's version when saved
  std::vector<std::shared_ptr<Storage>> counted_;  // storages this context added to the saved-bytes count
  std::any attrs_;
};

}  // namespace demi::autograd

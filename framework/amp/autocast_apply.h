// How apply<Op>() casts an op's tensor inputs under autocast: eligibility (floating, not F64, on
// the autocast device) and the target dtype from the op's category. Internal to framework/ops.
#pragma once

#include <vector>

#include "framework/amp/category.h"
#include "framework/tensor/tensor.h"

namespace demi::amp::detail {

// Whether autocast is on for any device kind (the fast check apply<Op>() makes first).
bool any_autocast_enabled();

// Suspends autocast for its scope: ops called inside another op's forward, and the backward pass,
// run in the dtypes they are given (as PyTorch's autocast wrappers exclude themselves).
class SuspendGuard {
 public:
  SuspendGuard();
  ~SuspendGuard();
  SuspendGuard(const SuspendGuard&) = delete;
  SuspendGuard& operator=(const SuspendGuard&) = delete;
};
// Lifts every SuspendGuard for its scope: activation checkpointing reruns a forward pass inside
// backward, and that rerun must cast as the first run did.
class ResumeGuard {
 public:
  ResumeGuard();
  ~ResumeGuard();
  ResumeGuard(const ResumeGuard&) = delete;
  ResumeGuard& operator=(const ResumeGuard&) = delete;

 private:
  int previous_;
};
// Whether a SuspendGuard is active on this thread (inside an op's forward or a backward pass).
bool is_suspended();
// The dtype `category` casts the eligible inputs among `inputs` to; returns false when nothing
// is to be cast (autocast off for their device, category Unchanged, no eligible input).
bool autocast_target(Category category, const std::vector<const Tensor*>& inputs, DType* target);
// x cast to `dtype` when eligible (recorded by autograd; cached for fp32 leaf parameters).
Tensor autocast_input(const Tensor& x, DType dtype);

}  // namespace demi::amp::detail

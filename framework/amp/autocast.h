// Autocast: a thread-local, nestable region in which ops cast their floating inputs by category
// (lower precision for GEMM-backed ops, fp32 for numerically sensitive ones, promote for
// multi-input ones), as torch.autocast. The policy is the op table; apply<Op>() does the casting.
#pragma once

#include <string>

#include "framework/amp/category.h"
#include "framework/core/device.h"
#include "framework/core/dtype.h"

namespace demi::amp {

// Enables (or, with enabled=false, disables) autocast to `dtype` for ops on `kind` devices until
// the guard is destroyed, then restores the previous state. The fp32 -> half casts of parameters
// are cached until the outermost guard exits.
class AutocastGuard {
 public:
  AutocastGuard(Device::Kind kind, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  Device::Kind kind_;
  bool previous_enabled_;
  DType previous_dtype_;
};

bool is_autocast_enabled(Device::Kind kind);
// The lower-precision dtype of `kind`'s autocast (default: bf16 on the CPU, fp16 on CUDA).
DType autocast_dtype(Device::Kind kind);

// The category of the op named `op` ("conv2d", "softmax", ...); throws for an unknown name.
Category autocast_category(const std::string& op);
// The policy table, one line per op with its category and, per device kind, what it casts to.
std::string policy_table();

// Entries in the cast cache (parameters cast to half in the current autocast region).
size_t cast_cache_size();

}  // namespace demi::amp

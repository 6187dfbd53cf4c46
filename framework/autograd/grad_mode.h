// Grad mode: whether ops record themselves on the tape. NoGradGuard turns recording off for its
// scope (optimizer steps, evaluation), AutoGradMode sets it either way (activation checkpointing
// records its recomputation inside backward); each restores the previous state on exit; thread-local.
#pragma once

namespace demi {

bool is_grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// libtorch's AutoGradMode: grad mode `enabled` for its scope.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled);
  ~AutoGradMode();
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

}  // namespace demi

// Grad mode: whether ops record themselves on the tape. NoGradGuard turns recording off for its
// scope (optimizer steps, evaluation), restoring the previous state on exit; thread-local.
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

}  // namespace demi

// Thread-local grad mode behind NoGradGuard and AutoGradMode.
#include "framework/autograd/grad_mode.h"

namespace demi {
namespace {
thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }
AutoGradMode::AutoGradMode(bool enabled) : previous_(grad_enabled) { grad_enabled = enabled; }
AutoGradMode::~AutoGradMode() { grad_enabled = previous_; }

}  // namespace demi

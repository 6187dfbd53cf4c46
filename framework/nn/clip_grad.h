// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::nn {

// Scales the gradients of `params` so that their global L2 norm (computed in fp32) is at most
// max_norm; returns the norm before clipping as a 0-d float32 tensor. Under AMP, clip through
// GradScaler::clip_grad_norm_, which unscales first.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

namespace detail {
// The same over gradient tensors themselves (the GradScaler passes the unscaled targets).
Tensor clip_gradients_(const std::vector<Tensor>& grads, double max_norm);
}  // namespace detail

}  // namespace demi::nn

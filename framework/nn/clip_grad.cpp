// clip_grad_norm_: global L2 norm in fp32 (half gradients are squared after widening, so the sum
// cannot overflow), then every gradient times min(max_norm / (norm + 1e-6), 1), all on the device.
#include "framework/nn/clip_grad.h"

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::nn {

namespace detail {
Tensor clip_gradients_(const std::vector<Tensor>& grads, double max_norm) {
  DEMI_CHECK(max_norm > 0.0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  NoGradGuard no_grad;
  if (grads.empty()) return zeros({});
  Tensor total_sq;
  for (const Tensor& g : grads) {
    const Tensor sq = sum(pow(g.to(DType::F32), 2.0));
    total_sq = total_sq.defined() ? total_sq + sq.to(total_sq.device()) : sq;
  }
  const Tensor norm = sqrt(total_sq);
  // On the device, as PyTorch since 1.13: min(max_norm / (norm + 1e-6), 1), no host read. A
  // non-finite norm leaves the gradients as they are (factor 1) for the GradScaler to skip:
  // scaling by 0 or NaN would hide it.
  const Tensor coef = clamp(pow(norm + 1e-6, -1.0) * max_norm, std::nullopt, 1.0);
  const Tensor factor = where(isfinite(norm), coef, 1.0);
  for (const Tensor& g : grads) {
    const Tensor f = factor.to(g.device());
    // A half gradient is multiplied in fp32 and rounded once (mul_ would round the factor first).
    if (is_half(g.dtype())) g.copy_(g.to(DType::F32) * f);
    else g.mul_(f);
  }
  return norm;
}
}  // namespace detail

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return detail::clip_gradients_(grads, max_norm);
}

}  // namespace demi::nn

// Patch whitening (airbench, hlb-CIFAR10): a first convolution whose filters decorrelate the
// pixels of each k x k patch, computed from the training images instead of learnt.
#pragma once

#include "framework/demi/demi.h"

namespace demi::models {

// Weights [2d, C, k, k] for k x k patches of C channels (d = C k k values per patch): the
// eigenvectors v_i of the patches' second-moment matrix E[p p^T], largest eigenvalue first, each
// scaled by 1 / sqrt(lambda_i + eps), followed by their negations (so that a GELU after the
// convolution keeps both signs of every component). On the patches it was computed from, the
// first d outputs have covariance diag(lambda_i / (lambda_i + eps)): nearly the identity.
// `images`: float32 [N, C, H, W] on the CPU, normalised as training will see them.
Tensor patch_whitening_weights(const Tensor& images, int kernel_size, double eps = 5e-4);

}  // namespace demi::models

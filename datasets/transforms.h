// Whole-batch image transforms for test-time augmentation: a horizontal mirror and a translation
// with reflected borders, on normalised float32 [N, C, H, W] CPU batches (what DataLoader yields).
#pragma once

#include "framework/tensor/tensor.h"

namespace demi::data {

// out[n, c, y, x] = images[n, c, y, W - 1 - x].
Tensor mirror(const Tensor& images);

// Moves the content down by dy and right by dx pixels (negative: up, left); the uncovered border
// is the image mirrored at its edge, as torch.nn.functional.pad(mode="reflect") then a crop.
// |dy| and |dx| must be smaller than the image's height and width.
Tensor translate(const Tensor& images, int dy, int dx);

}  // namespace demi::data

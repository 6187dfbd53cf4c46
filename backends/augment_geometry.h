// Where augment_images (backends/kernels.h, AugmentArgs) takes each output value from: the one
// definition that the CPU's row loop and the CUDA kernel both call, so that the two backends cannot
// drift apart. A plan row is (src, dy, dx, flip, cy, cx); cy < 0 means no cutout.
#pragma once

#include <cstdint>

#ifndef DEMI_HOST_DEVICE
#if defined(__CUDACC__)
#define DEMI_HOST_DEVICE __host__ __device__
#else
#define DEMI_HOST_DEVICE
#endif
#endif

namespace demi::backend::augment {

// Source index of coordinate i (in (-n, 2n - 1)) of an image side n mirrored at its border.
DEMI_HOST_DEVICE inline int64_t reflect(int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); }

// The source row of output row y, or -1 where it falls outside the image (zero padding).
DEMI_HOST_DEVICE inline int64_t source_row(const int64_t* plan_row, int64_t y, int64_t h, bool reflect_pad) {
  const int64_t sy = reflect_pad ? reflect(y + plan_row[1], h) : y + plan_row[1];
  return sy >= 0 && sy < h ? sy : -1;
}

// The source column of output column x (mirrored first when the row flips), or -1 outside.
DEMI_HOST_DEVICE inline int64_t source_col(const int64_t* plan_row, int64_t x, int64_t w, bool reflect_pad) {
  int64_t sx = (plan_row[3] != 0 ? w - 1 - x : x) + plan_row[2];
  if (reflect_pad) sx = reflect(sx, w);
  return sx >= 0 && sx < w ? sx : -1;
}

// The cutout square of a plan row as [y0, y0 + cutout) x [x0, x0 + cutout), unclipped; none when
// cutout is 0 or the row's cy is negative.
DEMI_HOST_DEVICE inline bool has_cutout(const int64_t* plan_row, int cutout) { return cutout > 0 && plan_row[4] >= 0; }
DEMI_HOST_DEVICE inline int64_t cutout_y0(const int64_t* plan_row, int cutout) { return plan_row[4] - cutout / 2; }
DEMI_HOST_DEVICE inline int64_t cutout_x0(const int64_t* plan_row, int cutout) { return plan_row[5] - cutout / 2; }

}  // namespace demi::backend::augment

// The output extent of a 2-D convolution, in one place for the conv2d op, which sizes its output by
// it, and the backends' argument check (backends/kernel_checks.h), which holds the output to it.
#pragma once

#include <cstdint>

namespace demi {

struct Conv2dOutputShape {
  int64_t h, w;
};

// The output height and width of a convolution (dilation 1: demi's conv2d has no dilation) over an
// h x w input padded by ph rows and pw columns on each side, with a kh x kw kernel at stride (sh, sw).
// Needs h + 2 ph >= kh and w + 2 pw >= kw, which both callers check first.
inline Conv2dOutputShape conv2d_output_shape(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                             int64_t ph, int64_t pw) {
  return {(h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1};
}

}  // namespace demi

// broadcast_index(flat, y, s): where y's element `flat` (row-major) reads an operand of shape s that
// broadcasts to y (numpy rules, aligned from the right): the kernel tests' naive reference.
#pragma once

#include <cstdint>

#include "framework/core/shape.h"

namespace demi::test {

inline int64_t broadcast_index(int64_t flat, const Shape& y, const Shape& s) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < y.size(); ++k) {
    const int64_t coord = flat % y[y.size() - 1 - k];
    flat /= y[y.size() - 1 - k];
    if (k < s.size()) {
      const int64_t extent = s[s.size() - 1 - k];
      if (extent != 1) index += coord * stride;
      stride *= extent;
    }
  }
  return index;
}

}  // namespace demi::test

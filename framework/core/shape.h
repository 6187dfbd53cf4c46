// Shape: a tensor's extents, row-major; printed as [N, C, H, W] (operator<< in error.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <vector>

#include "framework/core/error.h"

namespace demi {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// numpy broadcasting: align from the right; each pair of extents must match or one must be 1.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DEMI_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
               " cannot be broadcast (dimension ", i, " is ", da, " vs ", db,
               "); extents must match or be 1");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace demi

// Normalises the `dims` argument of sum/mean: negative dims count from the end, empty means all.
#pragma once

#include <algorithm>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::ops {

inline std::vector<int64_t> normalize_dims(const char* op, const Tensor& x, std::vector<int64_t> dims) {
  const int64_t n = x.dim();
  if (dims.empty()) {
    for (int64_t d = 0; d < n; ++d) dims.push_back(d);
    return dims;
  }
  for (int64_t& d : dims) {
    DEMI_CHECK(d >= -n && d < n, op, ": dim ", d, " out of range for a tensor of shape ", x.shape());
    if (d < 0) d += n;
  }
  std::sort(dims.begin(), dims.end());
  DEMI_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), op, ": a dim appears twice");
  return dims;
}

// x's shape without (keepdim=false) or with extent 1 at (keepdim=true) the reduced dims.
inline Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) != dims.end();
    if (!reduced) out.push_back(shape[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace demi::ops

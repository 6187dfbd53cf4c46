// The device half of CudaKernels' deferred checks (cuda_kernels.h, defer_check): after a check
// kernel has recorded the first bad position of a call in slot[0] (all ones: none), the value found
// there is copied into slot[1] while the checked tensor is still alive (stream order), so that the
// error read later can name it.
#pragma once

#include <cstdint>

namespace demi::backend::cuda {

template <typename I>
__global__ void capture_bad_value_kernel(unsigned long long* slot, const I* values) {
  if (slot[0] != ~0ull) slot[1] = static_cast<unsigned long long>(static_cast<int64_t>(values[slot[0]]));
}

}  // namespace demi::backend::cuda

// PLACEHOLDER: the entries of this file throw until their CUDA kernels land.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {
[[noreturn]] void not_yet(const char* entry) {
  DEMI_THROW(entry, " is not implemented on CUDA yet (issue: CUDA backend); run on Device::cpu()");
}
}  // namespace

void CudaKernels::pool2d_forward(const Pool2dArgs&) { not_yet("pool2d_forward"); }
void CudaKernels::pool2d_backward(const Pool2dArgs&) { not_yet("pool2d_backward"); }

}  // namespace demi::backend::cuda

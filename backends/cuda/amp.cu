// PLACEHOLDER: the entries of this file throw until their CUDA kernels land.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {
[[noreturn]] void not_yet(const char* entry) {
  DEMI_THROW(entry, " is not implemented on CUDA yet (issue: CUDA backend); run on Device::cpu()");
}
}  // namespace

void CudaKernels::unscale_check_finite(const UnscaleArgs&) { not_yet("unscale_check_finite"); }
void CudaKernels::update_scale(const ScaleUpdateArgs&) { not_yet("update_scale"); }

}  // namespace demi::backend::cuda

// PLACEHOLDER: the entries of this file throw until their CUDA kernels land.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {
[[noreturn]] void not_yet(const char* entry) {
  DEMI_THROW(entry, " is not implemented on CUDA yet (issue: CUDA backend); run on Device::cpu()");
}
}  // namespace

struct CudaKernels::ConvPlans {};
CudaKernels::ConvPlans& CudaKernels::conv_plans() {
  std::call_once(conv_plans_once_, [this] { conv_plans_.reset(new ConvPlans); });
  return *conv_plans_;
}
void CudaKernels::PlansDeleter::operator()(ConvPlans* plans) const { delete plans; }

void CudaKernels::conv2d_forward(const Conv2dArgs&) { not_yet("conv2d_forward"); }
void CudaKernels::conv2d_backward_data(const Conv2dArgs&) { not_yet("conv2d_backward_data"); }
void CudaKernels::conv2d_backward_weight(const Conv2dArgs&) { not_yet("conv2d_backward_weight"); }

}  // namespace demi::backend::cuda

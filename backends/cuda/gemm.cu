// PLACEHOLDER: the entries of this file throw until their CUDA kernels land.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {
[[noreturn]] void not_yet(const char* entry) {
  DEMI_THROW(entry, " is not implemented on CUDA yet (issue: CUDA backend); run on Device::cpu()");
}
}  // namespace

struct CudaKernels::GemmPlans {};
CudaKernels::GemmPlans& CudaKernels::gemm_plans() {
  std::call_once(gemm_plans_once_, [this] { gemm_plans_.reset(new GemmPlans); });
  return *gemm_plans_;
}
void CudaKernels::PlansDeleter::operator()(GemmPlans* plans) const { delete plans; }

void CudaKernels::gemm(const GemmArgs&) { not_yet("gemm"); }

}  // namespace demi::backend::cuda

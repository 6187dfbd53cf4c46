// The Kernels entries the CUDA backend does not provide yet: each throws a demi::Error that names
// the entry and points to the CPU backend. An entry leaves this file when its .cu file lands.
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {
[[noreturn]] void not_yet(const char* entry) {
  DEMI_THROW(entry, " is not implemented on CUDA yet (issue: CUDA backend); run on Device::cpu()");
}
}  // namespace

void CudaKernels::reduce(ReduceKind, const TensorRef&, const TensorRef&) { not_yet("reduce"); }
void CudaKernels::gemm(const GemmArgs&) { not_yet("gemm"); }
void CudaKernels::conv2d_forward(const Conv2dArgs&) { not_yet("conv2d_forward"); }
void CudaKernels::conv2d_backward_data(const Conv2dArgs&) { not_yet("conv2d_backward_data"); }
void CudaKernels::conv2d_backward_weight(const Conv2dArgs&) { not_yet("conv2d_backward_weight"); }
void CudaKernels::pool2d_forward(const Pool2dArgs&) { not_yet("pool2d_forward"); }
void CudaKernels::pool2d_backward(const Pool2dArgs&) { not_yet("pool2d_backward"); }
void CudaKernels::batch_norm_forward(const BatchNormArgs&) { not_yet("batch_norm_forward"); }
void CudaKernels::batch_norm_backward(const BatchNormArgs&) { not_yet("batch_norm_backward"); }
void CudaKernels::softmax_forward(SoftmaxKind, const TensorRef&, const TensorRef&) { not_yet("softmax_forward"); }
void CudaKernels::softmax_backward(SoftmaxKind, const TensorRef&, const TensorRef&, const TensorRef&) {
  not_yet("softmax_backward");
}
void CudaKernels::cross_entropy_forward(const CrossEntropyArgs&) { not_yet("cross_entropy_forward"); }
void CudaKernels::cross_entropy_backward(const CrossEntropyArgs&) { not_yet("cross_entropy_backward"); }
void CudaKernels::random(const RandomArgs&) { not_yet("random"); }
void CudaKernels::sgd_step(const SgdArgs&) { not_yet("sgd_step"); }
void CudaKernels::adamw_step(const AdamWArgs&) { not_yet("adamw_step"); }
void CudaKernels::unscale_check_finite(const UnscaleArgs&) { not_yet("unscale_check_finite"); }
void CudaKernels::update_scale(const ScaleUpdateArgs&) { not_yet("update_scale"); }

}  // namespace demi::backend::cuda

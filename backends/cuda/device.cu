// CUDA device discovery and the per-device CudaKernels table behind cuda_registry.h, plus the
// lifetime of each device's stream and handles. Without a driver or a device nothing aborts:
// device_count() is 0 and kernels_for_device() throws a demi::Error that says why.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_registry.h"

namespace demi::backend::cuda {

namespace {

// Why no device can be used, from cudaGetDeviceCount's status ("" when it succeeded).
std::string unusable_reason(cudaError_t status) {
  if (status == cudaSuccess) return "";
  const std::string detail = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorName(status) +
                             ": " + cudaGetErrorString(status) + ")";
  if (status == cudaErrorInsufficientDriver)
    return "no CUDA driver (or one older than this CUDA " + std::to_string(CUDART_VERSION / 1000) +
           " runtime) was found" + detail;
  if (status == cudaErrorNoDevice) return "no CUDA device was found" + detail;
  return "CUDA could not be initialised" + detail;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but leave no error behind for the next check
    return 0;
  }
  return count;
}

Kernels& kernels_for_device(int index) {
  // Intentionally never destroyed: at exit the CUDA runtime may unload before static destructors
  // run, and destroying streams then fails. The driver frees everything with the process.
  struct Table {
    std::mutex mutex;
    std::vector<std::unique_ptr<CudaKernels>> devices;
  };
  static Table* const table = new Table;

  const std::lock_guard<std::mutex> lock(table->mutex);
  if (table->devices.empty()) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      DEMI_THROW("Device cuda:", index, " requested but ", unusable_reason(status),
                 "; use Device::cpu()");
    }
    if (count == 0)
      DEMI_THROW("Device cuda:", index, " requested but no CUDA device was found; use Device::cpu()");
    table->devices.resize(static_cast<size_t>(count));
  }
  const int count = static_cast<int>(table->devices.size());
  if (index < 0 || index >= count) {
    const std::string valid = count == 1 ? std::string("Device::cuda(0)")
                                         : "Device::cuda(0) to Device::cuda(" + std::to_string(count - 1) + ")";
    DEMI_THROW("Device cuda:", index, " requested but the index is out of range (found ", count,
               count == 1 ? " CUDA device" : " CUDA devices", "); use ", valid, " or Device::cpu()");
  }
  std::unique_ptr<CudaKernels>& slot = table->devices[static_cast<size_t>(index)];
  if (!slot) {
    try {
      slot = std::make_unique<CudaKernels>(index);
    } catch (const Error& e) {
      DEMI_THROW("Device cuda:", index, " could not be initialised: ", e.what(),
                 "; check nvidia-smi (is it busy, or in an exclusive compute mode?) or use Device::cpu()");
    }
  }
  return *slot;
}

DeviceGuard::DeviceGuard(int index) {
  DEMI_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) DEMI_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  // A destructor must not throw; a failure here leaves the other device current, which the next
  // guard (every backend entry opens one) corrects.
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
}

CudaKernels::CudaKernels(int index) : index_(index) {
  const DeviceGuard guard(index);
  try {
    DEMI_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, index));
    // Non-blocking: work here does not serialise with the legacy default stream that other
    // libraries in the process may use.
    DEMI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DEMI_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
    DEMI_CUDA_CHECK(cudaMalloc(&report_, sizeof(*report_)));
    DEMI_CUDA_CHECK(cudaMalloc(&deferred_slots_, sizeof(unsigned long long) * 2 * kDeferredChecks));
    DEMI_CUDA_CHECK(cudaMemset(deferred_slots_, 0xff, sizeof(unsigned long long) * 2 * kDeferredChecks));
  } catch (...) {
    release();
    throw;
  }
}

CudaKernels::~CudaKernels() { release(); }

void CudaKernels::release() noexcept {
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != index_ &&
                        cudaSetDevice(index_) == cudaSuccess;
  // Plans hold library descriptors: they go before the handles that made them.
  gemm_plans_.reset();
  conv_plans_.reset();
  if (workspace_) (void)cudaFree(workspace_);
  workspace_ = nullptr;
  for (void* ptr : kept_buffers_) (void)cudaFree(ptr);
  kept_buffers_.clear();
  workspace_bytes_ = 0;
#if DEMI_HAVE_CUDNN
  if (cudnn_) (void)cudnnDestroy(cudnn_);
  cudnn_ = nullptr;
#endif
  if (report_) (void)cudaFree(report_);
  report_ = nullptr;
  if (deferred_slots_) (void)cudaFree(deferred_slots_);
  deferred_slots_ = nullptr;
  if (cublaslt_) (void)cublasLtDestroy(cublaslt_);
  cublaslt_ = nullptr;
  if (stream_) (void)cudaStreamDestroy(stream_);
  stream_ = nullptr;
  if (switched) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

#if DEMI_HAVE_CUDNN
cudnnHandle_t CudaKernels::cudnn() {
  std::call_once(cudnn_once_, [this] {
    const DeviceGuard guard(index_);
    cudnnHandle_t handle = nullptr;
    DEMI_CUDNN_CHECK(cudnnCreate(&handle));
    const cudnnStatus_t status = cudnnSetStream(handle, stream_);
    if (status != CUDNN_STATUS_SUCCESS) (void)cudnnDestroy(handle);
    DEMI_CUDNN_CHECK(status);
    cudnn_ = handle;
  });
  return cudnn_;
}
#endif

}  // namespace demi::backend::cuda

// Status checks for the CUDA backend: DEMI_CUDA_CHECK, DEMI_CUBLAS_CHECK, DEMI_CUDNN_CHECK wrap every
// status-returning call, DEMI_CUDA_LAUNCH_CHECK follows every kernel launch. All throw demi::Error
// naming the statement (or kernel), the library's status name and string, and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include "framework/core/error.h"

// A CUDA runtime call. Sticky errors (a kernel fault) surface here at the next call that syncs.
#define DEMI_CUDA_CHECK(stmt)                                                                   \
  do {                                                                                          \
    const cudaError_t demi_status_ = (stmt);                                                    \
    if (demi_status_ != cudaSuccess)                                                            \
      ::demi::detail::throw_error(__FILE__, __LINE__, "CUDA error: ", #stmt, " failed with ",   \
                                  cudaGetErrorName(demi_status_), ": ",                         \
                                  cudaGetErrorString(demi_status_));                            \
  } while (0)

// A cuBLASLt call; needs <cublasLt.h> at the point of use.
#define DEMI_CUBLAS_CHECK(stmt)                                                                 \
  do {                                                                                          \
    const cublasStatus_t demi_status_ = (stmt);                                                 \
    if (demi_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::demi::detail::throw_error(__FILE__, __LINE__, "cuBLASLt error: ", #stmt, " failed with ", \
                                  cublasLtGetStatusName(demi_status_), ": ",                    \
                                  cublasLtGetStatusString(demi_status_));                       \
  } while (0)

// A cuDNN call; needs <cudnn.h> at the point of use (only when DEMI_HAVE_CUDNN).
#define DEMI_CUDNN_CHECK(stmt)                                                                  \
  do {                                                                                          \
    const cudnnStatus_t demi_status_ = (stmt);                                                  \
    if (demi_status_ != CUDNN_STATUS_SUCCESS)                                                   \
      ::demi::detail::throw_error(__FILE__, __LINE__, "cuDNN error: ", #stmt, " failed with ",  \
                                  cudnnGetErrorString(demi_status_));                           \
  } while (0)

// After a kernel launch: a bad launch configuration (or an earlier asynchronous fault) is reported
// against the kernel that was just launched. `kernel` is a string naming it, e.g. "cast_kernel".
#define DEMI_CUDA_LAUNCH_CHECK(kernel)                                                           \
  do {                                                                                           \
    const cudaError_t demi_status_ = cudaGetLastError();                                         \
    if (demi_status_ != cudaSuccess)                                                             \
      ::demi::detail::throw_error(__FILE__, __LINE__, "CUDA error: launching ", kernel,          \
                                  " failed with ", cudaGetErrorName(demi_status_), ": ",         \
                                  cudaGetErrorString(demi_status_));                             \
  } while (0)

// Throws, naming `what`, when `stream` is being captured into a CUDA graph: `what` waits for the
// device or touches host memory, which a recording cannot hold (a replay would skip the wait or
// read a host buffer long gone). Checked before the call rather than after its failure, because a
// failing call also ends the capture with an error that does not say which operation it was.
inline void refuse_if_capturing(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (status != cudaStreamCaptureStatusNone)
    DEMI_THROW(what, " cannot run while a CUDA graph is being captured (it waits for the device or reads host "
               "memory, which a replay would not repeat); make such tensors and checks before the capture, "
               "or run this step eagerly");
}

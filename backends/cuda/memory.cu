// CUDA memory: raw cudaMalloc / cudaFree (the caching allocator in framework/tensor sits on top, so
// these run only on a cache miss) and copies on the device's stream. Host copies synchronise before
// returning, so the host buffer may be reused or freed at once.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/host_reads.h"

namespace demi::backend::cuda {

void* CudaKernels::raw_allocate(size_t bytes) {
  const DeviceGuard guard(index_);
  void* ptr = nullptr;
  // During a capture the caching allocator still allocates from the system on a miss (into the
  // graph's private pool, which keeps the block for the graph): the relaxed mode lets it, as the
  // allocation is not part of what replays repeat.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (capture_) DEMI_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  // cudaMalloc(0) yields nullptr; a 0-byte tensor still gets a distinct pointer, as on the CPU.
  const cudaError_t status = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
  if (capture_) DEMI_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it so later checks pass
    size_t free_bytes = 0, total_bytes = 0;
    DEMI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    DEMI_THROW("CUDA allocator: out of memory allocating ", bytes, " bytes on cuda:", index_, " (",
               free_bytes, " of ", total_bytes,
               " bytes free); reduce the batch size, free tensors or use a smaller model");
  }
  DEMI_CUDA_CHECK(status);
  return ptr;
}

void CudaKernels::raw_free(void* ptr) {
  if (ptr == nullptr) return;
  // At process exit the runtime may unload before the caching allocator's destructor returns its
  // blocks: the memory goes with the context then, and a throw from a destructor would abort.
  int current = -1;
  if (cudaGetDevice(&current) == cudaErrorCudartUnloading) return;
  refuse_if_capturing(stream_, "freeing CUDA memory (empty_cache)");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaFree(ptr));
}

void CudaKernels::copy_from_host(const void* host_src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  refuse_if_capturing(stream_, "a copy from the host to the device");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaKernels::copy_to_host(const void* src, void* host_dst, size_t bytes) {
  if (bytes == 0) return;
  refuse_if_capturing(stream_, "a copy from the device to the host");
  note_host_read("a copy to the host");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_deferred();
}

void CudaKernels::copy(const void* src, void* dst, size_t bytes) {
  if (bytes == 0 || src == dst) return;
  const auto s = reinterpret_cast<uintptr_t>(src);
  const auto d = reinterpret_cast<uintptr_t>(dst);
  // The CPU backend's copy is a memmove; cudaMemcpy's result for overlapping ranges is undefined.
  DEMI_CHECK(s + bytes <= d || d + bytes <= s, "copy on cuda:", index_, ": source and destination of ",
             bytes, " bytes overlap (", src, " and ", dst,
             "); the CUDA backend copies only between disjoint buffers");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaKernels::synchronize() {
  refuse_if_capturing(stream_, "synchronize()");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_deferred();
}

void* CudaKernels::workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  const DeviceGuard guard(index_);
  // Grow by at least half again, so that a run of slowly growing requests reallocates rarely.
  const size_t grown = bytes > workspace_bytes_ + workspace_bytes_ / 2 ? bytes : workspace_bytes_ + workspace_bytes_ / 2;
  if (workspace_) {
    release_buffer(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  workspace_ = raw_allocate(grown);
  workspace_bytes_ = grown;
  return workspace_;
}

void CudaKernels::release_buffer(void* ptr) {
  if (ptr == nullptr) return;
  if (capture_ || graphs_made_ > 0) {  // a graph may hold its address
    kept_buffers_.push_back(ptr);
    return;
  }
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a queued call may still use it
  DEMI_CUDA_CHECK(cudaFree(ptr));
}

}  // namespace demi::backend::cuda

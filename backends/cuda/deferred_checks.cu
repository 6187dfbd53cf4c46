// CudaKernels' deferred checks (cuda_kernels.h): the slots, the flush at a synchronisation, and the
// early flush when every slot is taken.
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/host_reads.h"

namespace demi::backend::cuda {

unsigned long long* CudaKernels::defer_check(DeferredError raise) {
  if (deferred_.size() == kDeferredChecks) {  // every slot taken: read them now
    note_host_read("deferred index checks, all slots taken");
    DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    check_deferred();
  }
  unsigned long long* slot = deferred_slots_ + 2 * deferred_.size();
  deferred_.push_back(std::move(raise));
  return slot;
}

void CudaKernels::check_deferred() {
  if (deferred_.empty()) return;
  const size_t n = deferred_.size();
  std::vector<unsigned long long> words(2 * n);
  // The stream has just been waited for: this copy waits for nothing.
  DEMI_CUDA_CHECK(cudaMemcpyAsync(words.data(), deferred_slots_, sizeof(unsigned long long) * 2 * n,
                                  cudaMemcpyDeviceToHost, stream_));
  DEMI_CUDA_CHECK(cudaMemsetAsync(deferred_slots_, 0xff, sizeof(unsigned long long) * 2 * n, stream_));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<DeferredError> pending = std::move(deferred_);
  deferred_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (words[2 * i] == ~0ull) continue;
    pending[i](static_cast<int64_t>(words[2 * i]), static_cast<int64_t>(words[2 * i + 1]));  // throws
  }
}

}  // namespace demi::backend::cuda

// CudaKernels' deferred checks (cuda_kernels.h): the slots, the flush at a synchronisation, and the
// early flush when every slot is taken.
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/host_reads.h"

namespace demi::backend::cuda {

unsigned long long* CudaKernels::defer_check(DeferredError raise) {
  if (capture_) {  // the graph's own slots, read after each replay
    std::vector<DeferredError>& calls = capture_->raise;
    DEMI_CHECK(calls.size() < kDeferredChecks, "CUDA graph capture: the captured work holds more than ",
               kDeferredChecks, " deferred index checks (max_pool2d backward, cross_entropy); capture a shorter step");
    unsigned long long* slot = capture_->slots + 2 * calls.size();
    calls.push_back(std::move(raise));
    return slot;
  }
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
  const std::vector<std::shared_ptr<CaptureChecks>> graphs = std::move(replayed_);
  replayed_.clear();
  const std::vector<DeferredError> eager = std::move(deferred_);
  deferred_.clear();
  // Every pending slot is read and set back to all ones before any error is raised, so that a
  // throw leaves no stale verdict behind: the replayed graphs' checks, then the eager calls'.
  std::vector<std::pair<const std::vector<DeferredError>*, std::vector<unsigned long long>>> reads;
  reads.reserve(graphs.size() + 1);
  auto read = [&](unsigned long long* slots, const std::vector<DeferredError>& raise) {
    if (raise.empty()) return;
    reads.emplace_back(&raise, std::vector<unsigned long long>(2 * raise.size()));
    const size_t bytes = sizeof(unsigned long long) * 2 * raise.size();
    // The stream has just been waited for: this copy waits for nothing.
    DEMI_CUDA_CHECK(cudaMemcpyAsync(reads.back().second.data(), slots, bytes, cudaMemcpyDeviceToHost, stream_));
    DEMI_CUDA_CHECK(cudaMemsetAsync(slots, 0xff, bytes, stream_));
  };
  for (const std::shared_ptr<CaptureChecks>& graph : graphs) read(graph->slots, graph->raise);
  read(deferred_slots_, eager);
  if (reads.empty()) return;
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (const auto& [raise, words] : reads) {
    for (size_t i = 0; i < raise->size(); ++i) {
      if (words[2 * i] == ~0ull) continue;
      (*raise)[i](static_cast<int64_t>(words[2 * i]), static_cast<int64_t>(words[2 * i + 1]));  // throws
    }
  }
}

}  // namespace demi::backend::cuda

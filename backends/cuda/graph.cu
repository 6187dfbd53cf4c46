// CUDA graphs of one device's stream (Kernels::capture_begin): record, instantiate, replay. The
// memory a recording uses is the caching allocator's business (its private pools); what is here
// is the stream capture itself and the deferred checks of captured calls.
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"

namespace demi::backend::cuda {

namespace {

class CudaGraph final : public Kernels::Graph {
 public:
  CudaGraph(int device, cudaGraphExec_t exec, std::shared_ptr<CudaKernels::CaptureChecks> checks)
      : device_(device), exec_(exec), checks_(std::move(checks)) {}
  ~CudaGraph() override {
    int current = -1;
    if (cudaGetDevice(&current) == cudaErrorCudartUnloading) return;  // the context goes with the process
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGetLastError();
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  int device() const { return device_; }
  cudaGraphExec_t exec() const { return exec_; }
  const std::shared_ptr<CudaKernels::CaptureChecks>& checks() const { return checks_; }

 private:
  int device_;
  cudaGraphExec_t exec_;
  std::shared_ptr<CudaKernels::CaptureChecks> checks_;
};

}  // namespace

CudaKernels::CaptureChecks::~CaptureChecks() {
  int current = -1;
  if (slots == nullptr || cudaGetDevice(&current) == cudaErrorCudartUnloading) return;
  (void)cudaFree(slots);
  (void)cudaGetLastError();
}

void CudaKernels::capture_begin() {
  DEMI_CHECK(!capture_, "CUDA graph capture: cuda:", index_, " is already capturing; end that capture first");
  const DeviceGuard guard(index_);
  auto checks = std::make_shared<CaptureChecks>();
  const size_t bytes = sizeof(unsigned long long) * 2 * kDeferredChecks;
  DEMI_CUDA_CHECK(cudaMalloc(&checks->slots, bytes));
  DEMI_CUDA_CHECK(cudaMemsetAsync(checks->slots, 0xff, bytes, stream_));
  // Thread-local: this thread may not make unsafe calls (they would end the capture), other threads
  // (data loading) are not affected.
  DEMI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capture_ = std::move(checks);
}

std::unique_ptr<Kernels::Graph> CudaKernels::capture_end() {
  DEMI_CHECK(capture_, "CUDA graph capture: capture_end on cuda:", index_, " without capture_begin");
  const DeviceGuard guard(index_);
  std::shared_ptr<CaptureChecks> checks = std::move(capture_);
  capture_.reset();
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    DEMI_THROW("CUDA graph capture on cuda:", index_, " failed: ", cudaGetErrorName(status), ": ",
               cudaGetErrorString(status), " (an operation that cannot be recorded ran during the capture, on this "
               "thread or with another stream)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  DEMI_CUDA_CHECK(made);
  ++graphs_made_;
  return std::make_unique<CudaGraph>(index_, exec, std::move(checks));
}

void CudaKernels::abort_capture() {
  if (!capture_) return;
  const DeviceGuard guard(index_);
  capture_.reset();
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // an invalidated capture leaves its error behind
}

void CudaKernels::replay(Graph& graph) {
  auto* cuda_graph = dynamic_cast<CudaGraph*>(&graph);
  DEMI_CHECK(cuda_graph && cuda_graph->device() == index_, "CUDA graph replay: the graph was not captured on cuda:",
             index_);
  DEMI_CHECK(!capture_, "CUDA graph replay: cuda:", index_, " is capturing; replay after capture_end");
  const DeviceGuard guard(index_);
  DEMI_CUDA_CHECK(cudaGraphLaunch(cuda_graph->exec(), stream_));
  const std::shared_ptr<CaptureChecks>& checks = cuda_graph->checks();
  if (checks->raise.empty()) return;
  for (const std::shared_ptr<CaptureChecks>& pending : replayed_) {
    if (pending == checks) return;  // a slot keeps the first bad position until it is read
  }
  replayed_.push_back(checks);
}

}  // namespace demi::backend::cuda

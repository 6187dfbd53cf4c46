// CudaKernels: the CUDA backend for one device, owning that device's stream and library handles.
// Each kernel family is defined in the .cu file of the same stem; this class only gathers them.
// Internal to backends/cuda: included only by .cu files (cuda_registry.h is the plain-C++ face).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/kernels.h"

#if DEMI_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace demi::backend::cuda {

class CudaKernels final : public Kernels {
 public:
  // device.cu: creates the stream and handles on device `index` (already validated).
  explicit CudaKernels(int index);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  Device device() const override { return Device::cuda(index_); }
  bool supports(KernelFamily family) const override;  // Conv2d only with cuDNN; no BatchNormRelu or BatchNormGelu (conv2d.cu)

  // memory.cu
  void* raw_allocate(size_t bytes) override;
  void raw_free(void* ptr) override;
  void copy_from_host(const void* host_src, void* dst, size_t bytes) override;
  void copy_to_host(const void* src, void* host_dst, size_t bytes) override;
  void copy(const void* src, void* dst, size_t bytes) override;
  void synchronize() override;

  // graph.cu: CUDA graphs of this device's stream (Kernels::capture_begin). A capture records in
  // thread-local mode, so other threads may keep launching on other streams; checks deferred by
  // captured calls get slots of the graph's own (CaptureChecks), read after each replay.
  void capture_begin() override;
  std::unique_ptr<Graph> capture_end() override;
  void abort_capture() override;
  void replay(Graph& graph) override;
  bool capturing() const override { return capture_ != nullptr; }

 private:
  // The kernels (backends/kernels.h checks their arguments before calling these).
  // elementwise.cu
  void fill_impl(const TensorRef& y, double value) override;
  void cast_impl(const TensorRef& x, const TensorRef& y) override;
  void unary_impl(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) override;
  void binary_impl(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) override;
  // reduce.cu
  void reduce_impl(ReduceKind kind, const TensorRef& x, const TensorRef& y, const ReduceDims& dims) override;
  void argmax_impl(const TensorRef& x, const TensorRef& y) override;
  // permute.cu
  void permute_impl(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) override;
  // gemm.cu (cuBLASLt)
  void gemm_impl(const GemmArgs& args) override;
  struct GemmCall;  // gemm_impl's steps, nested for cast_impl
  // conv2d.cu (cuDNN)
  void conv2d_forward_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  void conv2d_backward_data_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  void conv2d_backward_weight_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  // pool2d.cu
  void pool2d_forward_impl(const Pool2dArgs& args, const PoolGeom& g) override;
  void pool2d_backward_impl(const Pool2dArgs& args, const PoolGeom& g) override;
  // batch_norm.cu
  void batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) override;
  void batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) override;
  // softmax.cu
  void softmax_forward_impl(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) override;
  void softmax_backward_impl(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                             const TensorRef& grad_x) override;
  // cross_entropy.cu
  void cross_entropy_forward_impl(const CrossEntropyArgs& args) override;
  void cross_entropy_backward_impl(const CrossEntropyArgs& args) override;
  // random.cu
  void random_impl(const RandomArgs& args) override;
  // optim.cu: fused optimizer steps (half param and grad, fp32 master and moments, one pass)
  void sgd_step_impl(const SgdArgs& args) override;
  void adamw_step_impl(const AdamWArgs& args) override;
  // amp.cu: GradScaler's device-side kernels
  void unscale_check_finite_impl(const UnscaleArgs& args) override;
  void update_scale_impl(const ScaleUpdateArgs& args) override;
  // dropout.cu
  void dropout_impl(const DropoutArgs& args, const DropoutMask& mask) override;
  // embedding.cu
  void embedding_forward_impl(const EmbeddingArgs& args) override;
  void embedding_backward_impl(const EmbeddingArgs& args) override;
  // reduce.cu
  void argmin_impl(const TensorRef& x, const TensorRef& y) override;
  // elementwise.cu
  void where_impl(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) override;
  // attention.cu: cuBLASLt products through gemm_impl, the softmax and its gradient in fp32
  void attention_forward_impl(const AttentionArgs& args, const AttnGeom& g) override;
  void attention_backward_impl(const AttentionArgs& args, const AttnGeom& g) override;
  void round_with_residual(const AttentionArgs& args, const TensorRef& out_fp32);
  // layer_norm.cu
  void layer_norm_forward_impl(const LayerNormArgs& args) override;
  void layer_norm_backward_impl(const LayerNormArgs& args) override;
  // augment.cu
  void augment_images_impl(const AugmentArgs& args) override;

 public:
  // memory.cu: a device buffer of at least `bytes` for a library call's scratch (cuBLASLt, cuDNN),
  // shared by every call of this device: calls run one at a time on stream(), so one buffer serves
  // them all. It only grows (cudaMalloc on growth, after the stream drains), so a training loop
  // that repeats its shapes allocates nothing after its first step. Valid until the next call.
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return workspace_bytes_; }

  // Per-shape plans, built on first use of a shape and reused: cuBLASLt descriptors and the
  // heuristic's algorithm (gemm.cu), cuDNN descriptors and the chosen algorithms (conv2d.cu).
  // Each type is defined, created and destroyed in its own .cu file.
  struct GemmPlans;
  struct ConvPlans;
  GemmPlans& gemm_plans();  // gemm.cu
  ConvPlans& conv_plans();  // conv2d.cu
  // attention.cu: a second buffer like workspace(), for the scores and widened operands an attention
  // call keeps while the GEMMs it runs take workspace() for themselves. Valid until the next call.
  struct AttentionScratch;
  void* attention_scratch(size_t bytes);

  int index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  // One device word through which a kernel reports back to the host (the first element a checked
  // cast could not convert). Kernels of one CudaKernels run one at a time on its stream.
  unsigned long long* report() const { return report_; }
  // deferred_checks.cu: checks whose verdict the host reads at its next synchronisation instead of
  // right after the call (max_pool2d's backward, cross_entropy's labels), so that a training step
  // makes no host read. A check kernel records the first bad position of its call in slot[0] of
  // the pair defer_check returns (all ones: none) and capture_bad_value_kernel copies the value
  // there into slot[1]; copy_to_host and synchronize read the pending pairs after their own wait
  // and call the first bad call's `raise` with (position, value), which throws the op's error:
  // like a CUDA device-side assert, it arrives after the call. A call beyond kDeferredChecks
  // pending ones reads them first (one host read).
  using DeferredError = std::function<void(int64_t position, int64_t value)>;
  static constexpr size_t kDeferredChecks = 256;
  unsigned long long* defer_check(DeferredError raise);
  void check_deferred();  // after the stream has been waited for
  // The deferred checks of a captured graph: their slots and `raise`s, read at the first
  // synchronisation after a replay.
  struct CaptureChecks {
    unsigned long long* slots = nullptr;  // 2 * kDeferredChecks words, all ones when clear
    std::vector<DeferredError> raise;
    ~CaptureChecks();
  };
  // A buffer that may have been recorded into a graph (workspace(), attention_scratch()) is not
  // freed once graphs exist: it is kept until the device's kernels are released.
  void release_buffer(void* ptr);
#if DEMI_HAVE_CUDNN
  // Created on first use (device.cu): cudnnCreate loads cuDNN's sub-libraries, which costs
  // hundreds of milliseconds that a run without convolutions should not pay.
  cudnnHandle_t cudnn();
#endif

  // Blocks for a grid-stride loop of `threads`-wide blocks over n > 0 elements: enough to fill
  // every SM once (2048 resident threads each), fewer when n is small.
  unsigned blocks_for(int64_t n, int threads) const {
    const int64_t wanted = (n + threads - 1) / threads;
    const int64_t full = static_cast<int64_t>(sm_count_) * (2048 / threads);
    return static_cast<unsigned>(wanted < full ? wanted : full);
  }

 private:
  void release() noexcept;  // destroys whatever the constructor created; errors are ignored

  int index_;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;          // every kernel and copy of this device runs here
  cublasLtHandle_t cublaslt_ = nullptr;    // gemm
  unsigned long long* report_ = nullptr;
  unsigned long long* deferred_slots_ = nullptr;  // 2 * kDeferredChecks words, all ones when free
  std::vector<DeferredError> deferred_;           // the pending checks, by slot
  std::shared_ptr<CaptureChecks> capture_;        // while capturing: the new graph's checks
  std::vector<std::shared_ptr<CaptureChecks>> replayed_;  // replayed since the last read
  int graphs_made_ = 0;                           // captures ended so far
  std::vector<void*> kept_buffers_;               // release_buffer's, freed by release()
  void* workspace_ = nullptr;  // see workspace()
  size_t workspace_bytes_ = 0;
  struct PlansDeleter {  // each operator() is defined beside its type
    void operator()(GemmPlans* plans) const;
    void operator()(ConvPlans* plans) const;
    void operator()(AttentionScratch* scratch) const;
  };
  std::once_flag gemm_plans_once_, conv_plans_once_;
  std::unique_ptr<GemmPlans, PlansDeleter> gemm_plans_;
  std::unique_ptr<ConvPlans, PlansDeleter> conv_plans_;
  std::unique_ptr<AttentionScratch, PlansDeleter> attention_scratch_;
#if DEMI_HAVE_CUDNN
  std::once_flag cudnn_once_;
  cudnnHandle_t cudnn_ = nullptr;
#endif
};

// Makes device `index` current for a scope and restores the caller's device after, so that
// allocations, streams and launches of cuda:i happen on device i whatever the thread's state.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace demi::backend::cuda

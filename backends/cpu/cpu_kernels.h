// CpuKernels: the CPU backend, on Eigen and OpenMP. Each kernel family is defined in the file of
// the same stem (gemm.cpp, conv2d.cpp, ...); this class only gathers them.
#pragma once

#include "backends/kernels.h"

namespace demi::backend::cpu {

class CpuKernels final : public Kernels {
 public:
  Device device() const override { return Device::cpu(); }
  // No NHWC kernels yet: ops hand the CPU contiguous tensors (one conversion at the op's edge).
  bool supports(KernelFamily family) const override { return family != KernelFamily::ChannelsLast; }

  // memory.cpp
  void* raw_allocate(size_t bytes) override;
  void raw_free(void* ptr) override;
  void copy_from_host(const void* host_src, void* dst, size_t bytes) override;
  void copy_to_host(const void* src, void* host_dst, size_t bytes) override;
  void copy(const void* src, void* dst, size_t bytes) override;
  void synchronize() override {}

 private:
  // The kernels (backends/kernels.h checks their arguments before calling these).
  // elementwise.cpp
  void fill_impl(const TensorRef& y, double value) override;
  void cast_impl(const TensorRef& x, const TensorRef& y) override;
  void unary_impl(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) override;
  void binary_impl(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) override;
  // reduce.cpp
  void reduce_impl(ReduceKind kind, const TensorRef& x, const TensorRef& y, const ReduceDims& dims) override;
  void argmax_impl(const TensorRef& x, const TensorRef& y) override;
  // permute.cpp
  void permute_impl(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) override;
  // gemm.cpp
  void gemm_impl(const GemmArgs& args) override;
  // conv2d.cpp
  void conv2d_forward_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  void conv2d_backward_data_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  void conv2d_backward_weight_impl(const Conv2dArgs& args, const ConvGeom& g) override;
  // pool2d.cpp
  void pool2d_forward_impl(const Pool2dArgs& args, const PoolGeom& g) override;
  void pool2d_backward_impl(const Pool2dArgs& args, const PoolGeom& g) override;
  // batch_norm.cpp, batch_norm_backward.cpp
  void batch_norm_forward_impl(const BatchNormArgs& args, const BnGeom& g) override;
  void batch_norm_backward_impl(const BatchNormArgs& args, const BnGeom& g) override;
  // softmax.cpp
  void softmax_forward_impl(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) override;
  void softmax_backward_impl(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                             const TensorRef& grad_x) override;
  // cross_entropy.cpp
  void cross_entropy_forward_impl(const CrossEntropyArgs& args) override;
  void cross_entropy_backward_impl(const CrossEntropyArgs& args) override;
  // random.cpp
  void random_impl(const RandomArgs& args) override;
  // sgd.cpp
  void sgd_step_impl(const SgdArgs& args) override;
  // adamw.cpp
  void adamw_step_impl(const AdamWArgs& args) override;
  // amp.cpp
  void unscale_check_finite_impl(const UnscaleArgs& args) override;
  void update_scale_impl(const ScaleUpdateArgs& args) override;
  // dropout.cpp
  void dropout_impl(const DropoutArgs& args, const DropoutMask& mask) override;
  // embedding.cpp
  void embedding_forward_impl(const EmbeddingArgs& args) override;
  void embedding_backward_impl(const EmbeddingArgs& args) override;
  // reduce.cpp
  void argmin_impl(const TensorRef& x, const TensorRef& y) override;
  // where.cpp
  void where_impl(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) override;
  // attention.cpp, attention_backward.cpp
  void attention_forward_impl(const AttentionArgs& args, const AttnGeom& g) override;
  void attention_backward_impl(const AttentionArgs& args, const AttnGeom& g) override;
  // layer_norm.cpp
  void layer_norm_forward_impl(const LayerNormArgs& args) override;
  void layer_norm_backward_impl(const LayerNormArgs& args) override;
  // augment.cpp
  void augment_images_impl(const AugmentArgs& args) override;
};

}  // namespace demi::backend::cpu

// CpuKernels: the CPU backend, on Eigen and OpenMP. Each kernel family is defined in the file of
// the same stem (gemm.cpp, conv2d.cpp, ...); this class only gathers them.
#pragma once

#include "backends/kernels.h"

namespace demi::backend::cpu {

class CpuKernels final : public Kernels {
 public:
  Device device() const override { return Device::cpu(); }

  // memory.cpp
  void* raw_allocate(size_t bytes) override;
  void raw_free(void* ptr) override;
  void copy_from_host(const void* host_src, void* dst, size_t bytes) override;
  void copy_to_host(const void* src, void* host_dst, size_t bytes) override;
  void copy(const void* src, void* dst, size_t bytes) override;
  void synchronize() override {}

  // elementwise.cpp
  void fill(const TensorRef& y, double value) override;
  void cast(const TensorRef& x, const TensorRef& y) override;
  void unary(UnaryKind kind, const TensorRef& x, const TensorRef& y, double alpha, double beta) override;
  void binary(BinaryKind kind, const TensorRef& a, const TensorRef& b, const TensorRef& y) override;
  // reduce.cpp
  void reduce(ReduceKind kind, const TensorRef& x, const TensorRef& y) override;
  void argmax(const TensorRef& x, const TensorRef& y) override;
  // permute.cpp
  void permute(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) override;
  // gemm.cpp
  void gemm(const GemmArgs& args) override;
  // conv2d.cpp
  void conv2d_forward(const Conv2dArgs& args) override;
  void conv2d_backward_data(const Conv2dArgs& args) override;
  void conv2d_backward_weight(const Conv2dArgs& args) override;
  // pool2d.cpp
  void pool2d_forward(const Pool2dArgs& args) override;
  void pool2d_backward(const Pool2dArgs& args) override;
  // batch_norm.cpp
  void batch_norm_forward(const BatchNormArgs& args) override;
  void batch_norm_backward(const BatchNormArgs& args) override;
  // softmax.cpp
  void softmax_forward(SoftmaxKind kind, const TensorRef& x, const TensorRef& y) override;
  void softmax_backward(SoftmaxKind kind, const TensorRef& y, const TensorRef& grad_y,
                        const TensorRef& grad_x) override;
  // cross_entropy.cpp
  void cross_entropy_forward(const CrossEntropyArgs& args) override;
  void cross_entropy_backward(const CrossEntropyArgs& args) override;
  // random.cpp
  void random(const RandomArgs& args) override;
  // sgd.cpp
  void sgd_step(const SgdArgs& args) override;
  // adamw.cpp
  void adamw_step(const AdamWArgs& args) override;
  // amp.cpp
  void unscale_check_finite(const UnscaleArgs& args) override;
  void update_scale(const ScaleUpdateArgs& args) override;
};

}  // namespace demi::backend::cpu

// Pooling modules: windowed max/avg pooling and global (adaptive-to-1x1) pooling.
#pragma once

#include "framework/nn/module.h"
#include "framework/ops/ops.h"

namespace demi::nn {

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size, as PyTorch's default.
  explicit MaxPool2d(int kernel_size, int stride = 0, int padding = 0)
      : kernel_size_(kernel_size), stride_(stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_size_, stride_, padding_); }

 private:
  int kernel_size_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int kernel_size, int stride = 0, int padding = 0)
      : kernel_size_(kernel_size), stride_(stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_size_, stride_, padding_); }

 private:
  int kernel_size_, stride_, padding_;
};

// [N, C, H, W] -> [N, C, 1, 1], as nn.AdaptiveAvgPool2d(1).
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }
};

// [N, C, H, W] -> [N, C, 1, 1], as nn.AdaptiveMaxPool2d(1).
class GlobalMaxPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_max_pool2d(x); }
};

}  // namespace demi::nn

// dist::SyncBatchNorm: BatchNorm2d whose training statistics are those of the global batch (all
// ranks' examples), as torch.nn.SyncBatchNorm; with DistributedDataParallel, N ranks then train
// exactly like one process on the concatenated batch. It costs two all-reduces per layer per pass
// (forward statistics, backward gradients of them) and a composite, unfused computation; DDP's
// default (per-replica statistics) needs none.
#pragma once

#include <memory>

#include "framework/dist/process_group.h"
#include "framework/nn/batch_norm2d.h"

namespace demi::dist {

class SyncBatchNorm : public nn::BatchNorm2d {
 public:
  // Shares `source`'s parameters and buffers (the same tensors: an optimizer built on them still
  // steps this layer).
  SyncBatchNorm(const nn::BatchNorm2d& source, std::shared_ptr<ProcessGroup> group);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// Replaces every BatchNorm2d below `module` by a SyncBatchNorm over `group` (PyTorch's
// SyncBatchNorm.convert_sync_batchnorm) and returns the module (a new one when it is itself a
// BatchNorm2d). Modules must run their children through the registry (as Sequential does).
std::shared_ptr<nn::Module> convert_sync_batch_norm(std::shared_ptr<nn::Module> module,
                                                    std::shared_ptr<ProcessGroup> group);

// Differentiable all-reduce (sum): every rank gets the sum; backward all-reduces the gradient.
Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group);

}  // namespace demi::dist

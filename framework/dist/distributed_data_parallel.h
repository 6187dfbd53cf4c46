// dist::DistributedDataParallel: PyTorch's DDP for demi. Wraps a module so that after backward()
// every rank holds the average of all ranks' gradients: rank 0's parameters and buffers are
// broadcast at construction; gradients are packed into buckets (in reverse registration order,
// roughly the order backward produces them, in the gradients' dtype), each bucket divided by the
// world size and all-reduced as soon as its last gradient arrives, while backward goes on; the
// pass ends with every bucket reduced and copied back into .grad. BatchNorm keeps per-replica
// batch statistics, as in PyTorch; rank 0's running statistics are broadcast before each training
// forward (broadcast_buffers), so every replica evaluates alike.
#pragma once

#include <memory>
#include <vector>

#include "framework/dist/process_group.h"
#include "framework/nn/module.h"

namespace demi::dist {

class DistributedDataParallel : public nn::Module {
 public:
  struct Options {
    double bucket_cap_mb = 25.0;       // PyTorch's default bucket size
    double first_bucket_cap_mb = 1.0;  // the first bucket (the last layers) is small so it goes out early
    bool broadcast_buffers = true;     // rank 0's buffers to every rank before each training forward
  };

  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          const Options& options);
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group)
      : DistributedDataParallel(std::move(module), std::move(group), Options{}) {}
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() { return *module_; }
  ProcessGroup& process_group() { return *group_; }
  size_t num_buckets() const;

  // While a NoSync lives, backward only accumulates locally (the micro-batches of gradient
  // accumulation but the last); the first backward after it synchronises the sum (PyTorch's no_sync).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };

 private:
  struct Reducer;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  Options options_;
  std::shared_ptr<Reducer> reducer_;  // shared with the gradient hooks, which hold it weakly
};

// Broadcasts `tensors` from `root` in one call per dtype (packed into a flat buffer), not one per tensor.
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

// Every rank takes rank 0's buffers of `module` (BatchNorm's running statistics): what DDP's
// training forward does, and what evaluation needs so that every rank scores the same model.
void broadcast_buffers(ProcessGroup& group, nn::Module& module);

}  // namespace demi::dist

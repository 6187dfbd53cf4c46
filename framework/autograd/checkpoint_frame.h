// The machinery behind demi::checkpoint (checkpoint.h), shared with OpContext: a frame keeps what
// rerunning a checkpointed function needs (the function, its inputs, the autocast state and the
// default generators' states), hands out a placeholder for each tensor the first run saves, and
// resolves them in backward by rerunning the function once. Internal to framework/autograd.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/tensor/generator.h"
#include "framework/tensor/tensor.h"

namespace demi::autograd::detail {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

class CheckpointFrame : public std::enable_shared_from_this<CheckpointFrame> {
 public:
  CheckpointFrame(CheckpointFn fn, const std::vector<Tensor>& inputs);
  ~CheckpointFrame();
  CheckpointFrame(const CheckpointFrame&) = delete;
  CheckpointFrame& operator=(const CheckpointFrame&) = delete;

  // The first run: fn on the inputs themselves (so the graph reaches them), with this frame active.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  bool recomputing() const { return state_ == State::Recomputing; }
  // A tensor saved inside the first run: returns the index of its placeholder.
  size_t defer(const Tensor& t);
  // A tensor saved inside the rerun; the rerun saves in the first run's order.
  void capture(const Tensor& t);
  // The tensor behind placeholder i, rerunning fn first when it has not been rerun; each is
  // handed out once (the frame stops holding it). `counted`: whether the first run's tensor counted
  // in saved_tensor_stats() (not a parameter).
  struct Resolved {
    Tensor tensor;
    bool counted = false;
  };
  Resolved take(size_t i);

 private:
  enum class State { Forward, Pending, Recomputing, Recomputed };
  struct Input {
    Tensor tensor;  // detached: the frame must not keep the graph before it alive
    bool requires_grad = false;
    bool counted = false;  // counts in saved_tensor_stats() when saved (not a parameter)
    uint64_t version = 0;
  };
  struct Placeholder {
    bool defined = false;
    Shape shape;
    DType dtype = DType::F32;
  };
  struct Captured {
    Tensor tensor;
    bool counted = false;
    std::shared_ptr<Storage> count;  // its storage, counted in saved_tensor_stats() while the frame holds it
  };
  struct AutocastState {
    bool enabled = false;
    DType dtype = DType::F32;
  };

  // The input whose storage t shares (t is it, or a view of it), or null.
  const Input* input_sharing_storage(const Tensor& t) const;
  void recompute();
  void rerun();
  void release_inputs();
  void release_captured();

  CheckpointFn fn_;
  std::vector<Input> inputs_;
  std::vector<std::shared_ptr<Storage>> input_counts_;
  AutocastState autocast_cpu_, autocast_cuda_;
  std::vector<std::pair<Device, GeneratorState>> rng_;  // the default generators before the first run
  State state_ = State::Forward;
  std::vector<Placeholder> placeholders_;
  // What the rerun will hold again, once each. Weak: the first run frees them, and a new storage
  // may then take a freed one's address.
  std::unordered_map<const Storage*, std::weak_ptr<Storage>> deferred_storages_;
  int64_t deferred_bytes_ = 0;
  std::vector<Captured> captured_;
};

// The innermost frame running or rerunning its function on this thread; null outside one.
CheckpointFrame* active_checkpoint_frame();

// The inputs and outputs of one checkpoint: runs fn under a new frame (or plainly when grad mode
// is off). Behind demi::checkpoint.
std::vector<Tensor> run_checkpointed(CheckpointFn fn, const std::vector<Tensor>& inputs);

}  // namespace demi::autograd::detail

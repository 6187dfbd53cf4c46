// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs, use_reentrant=False):
// memory for compute. The forward pass runs fn normally (its graph is recorded, edges to the inputs
// and to every parameter fn uses included) but keeps only fn's inputs, not the tensors fn's ops
// save for backward; backward reruns fn once, when it first needs one of them, with the autocast
// state and the default generators' states of the first run, so the gradients are bit for bit the
// plain run's (dropout included).
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/autograd/checkpoint_frame.h"
#include "framework/tensor/tensor.h"

namespace demi {

namespace autograd {
// Whether this thread is rerunning a checkpointed function (inside backward). Layers that change
// state in their forward pass skip that in the rerun, having done it in the first run: batch norm
// leaves its running statistics and num_batches_tracked alone (PyTorch would update them twice).
bool is_recomputing();

// Memory planning: while a trace lives, each checkpointed function run forward on this thread
// (outside a rerun) records what backward will hold while rerunning it: the saved bytes held when
// it started (saved_tensor_stats().current_bytes, its own inputs included) plus what its rerun saves
// again. Backward reruns them one at a time, last first, so the largest is the peak it reaches.
class RecomputeTrace {
 public:
  RecomputeTrace();
  ~RecomputeTrace();
  RecomputeTrace(const RecomputeTrace&) = delete;
  RecomputeTrace& operator=(const RecomputeTrace&) = delete;
  // One entry per checkpointed function, in the order they ran.
  const std::vector<int64_t>& peaks() const { return peaks_; }

 private:
  friend class detail::CheckpointFrame;
  RecomputeTrace* previous_;
  std::vector<int64_t> peaks_;
};
}  // namespace autograd

namespace detail {
template <typename Fn, typename... Ts, size_t... I>
std::vector<Tensor> call_checkpointed(Fn& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  if constexpr (std::is_same_v<std::decay_t<std::invoke_result_t<Fn&, const Ts&...>>, Tensor>) {
    return {fn(in[I]...)};
  } else {
    return fn(in[I]...);
  }
}
}  // namespace detail

// fn(inputs...) with its saved activations recomputed in backward instead of kept. fn takes the
// tensors (const Tensor&) and returns a Tensor or a std::vector<Tensor>; checkpoint returns the
// same. fn is copied and kept until backward has rerun it, so what it captures by reference must
// outlive the backward pass, and it must do the same work on each call (the rerun checks the
// shapes it saves). In-place changes to an input between forward and backward are an error.
// With grad mode off, fn just runs. Nested checkpoints work; an inner one keeps its own inputs.
template <typename Fn, typename... Ts>
auto checkpoint(Fn fn, const Ts&... inputs) {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "checkpoint(fn, inputs...): the inputs must be Tensors");
  using Result = std::decay_t<std::invoke_result_t<Fn&, const Ts&...>>;
  static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                "checkpoint(fn, inputs...): fn must return a Tensor or a std::vector<Tensor>");
  autograd::detail::CheckpointFn erased = [fn = std::move(fn)](const std::vector<Tensor>& in) mutable {
    return detail::call_checkpointed<Fn, Ts...>(fn, in, std::index_sequence_for<Ts...>{});
  };
  std::vector<Tensor> out = autograd::detail::run_checkpointed(std::move(erased), {inputs...});
  if constexpr (std::is_same_v<Result, Tensor>) {
    return out.at(0);
  } else {
    return out;
  }
}

}  // namespace demi

// The tape: every result of a recorded op holds a Node whose edges lead to the Nodes of its
// inputs; leaves that require grad end in an AccumulateGrad node that adds into .grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi::autograd {

class Node;

// Where the gradient of one input goes; `node` is empty when that input needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  Shape shape;  // the input's shape, dtype and memory format: incoming gradients are checked
  DType dtype = DType::F32;  // against the shape and converted to the dtype and format
  MemoryFormat format = MemoryFormat::Contiguous;
};

class Node {
 public:
  // Releases the graph behind this node iteratively: a chain of 100,000 ops must not recurse.
  virtual ~Node();
  virtual const char* name() const = 0;
  // One gradient per input (undefined where not needed), given the gradient of the output.
  virtual TensorList apply(const Tensor& grad_output) = 0;
  // Frees what forward saved; called once backward has passed this node.
  virtual void release_saved() {}

  std::vector<Edge> next;
};

// The sink of a leaf tensor: adds incoming gradients into leaf.grad in the leaf's dtype.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  const char* name() const override { return "AccumulateGrad"; }
  TensorList apply(const Tensor& grad_output) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The edge that gradients for `t` flow along (empty when t needs none).
Edge edge_of(const Tensor& t);

// Runs backward from `root` with initial gradient `grad_root`.
void run_backward(const Tensor& root, const Tensor& grad_root);

// Only during backward (from a hook): runs fn once the whole pass has finished, before backward()
// returns (PyTorch's queue_callback): data-parallel training waits for its all-reduces there.
void queue_callback(std::function<void()> fn);

// Bytes of the storages that live graphs saved for backward, each storage counted once;
// parameters (leaves that require grad) are not counted, their casts and all activations are.
struct SavedTensorStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};
SavedTensorStats saved_tensor_stats();
void reset_saved_tensor_peak();

}  // namespace demi::autograd

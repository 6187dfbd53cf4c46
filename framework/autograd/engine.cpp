// The backward pass: walks the graph from the root once, in reverse topological order (Kahn's
// algorithm over dependency counts, iterative so deep graphs cannot overflow the stack), summing
// the gradients that reach each node before running it.
#include <unordered_map>

#include "framework/amp/autocast_apply.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/profiler.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::autograd {

namespace {
// The callbacks queued by the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
}  // namespace

void queue_callback(std::function<void()> fn) {
  DEMI_CHECK(t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread; call it from a "
             "gradient hook");
  t_callbacks->push_back(std::move(fn));
}

Node::~Node() {
  std::vector<std::shared_ptr<Node>> orphans;
  for (Edge& edge : next) {
    if (edge.node) orphans.push_back(std::move(edge.node));
  }
  while (!orphans.empty()) {
    std::shared_ptr<Node> node = std::move(orphans.back());
    orphans.pop_back();
    if (node.use_count() == 1) {  // we hold the last reference: take its edges before it dies
      for (Edge& edge : node->next) {
        if (edge.node) orphans.push_back(std::move(edge.node));
      }
    }
  }
}

Edge edge_of(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  TensorImpl& impl = t.impl_ref();
  std::shared_ptr<Node> node = impl.grad_fn;
  if (!node) {
    node = impl.grad_accumulator.lock();
    if (!node) {
      node = std::make_shared<AccumulateGrad>(t.impl());
      impl.grad_accumulator = node;
    }
  }
  return Edge{node, impl.shape, impl.dtype, impl.memory_format};
}

TensorList AccumulateGrad::apply(const Tensor& grad_output) {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  if (!leaf) return {};
  Tensor& grad = leaf->grad;
  if (!grad.defined()) {
    // Take the incoming tensor when nothing else holds its storage; copy it otherwise, so a later
    // in-place accumulation cannot write into another tensor's gradient.
    grad = grad_output.impl()->storage.use_count() == 1 ? grad_output.detach() : grad_output.clone();
    grad.set_memory_category(MemoryCategory::Gradients);
  } else {
    DEMI_CHECK(grad.dtype() == grad_output.dtype(), "backward(): cannot add a ", grad_output.dtype(),
               " gradient into a ", leaf->dtype, " tensor's existing ", grad.dtype(), " .grad. After "
               "GradScaler::unscale_, a half parameter with an fp32 master holds its fp32 true gradient in "
               ".grad: run every backward() of a step before unscale_, and zero_grad() before the next step");
    // Into .grad's own format (a .grad set by hand may differ from the leaf's).
    const Tensor incoming = grad_output.contiguous(grad.suggest_memory_format());
    kernels(grad).binary(backend::BinaryKind::Add, grad.storage_ref(), incoming.storage_ref(), grad.storage_ref());
  }
  if (!leaf->post_accumulate_grad_hooks.empty()) {
    const Tensor tensor(leaf);
    const auto hooks = leaf->post_accumulate_grad_hooks;  // a hook may remove itself
    for (const auto& hook : hooks) hook.second(tensor);
  }
  return {};
}

void run_backward(const Tensor& root, const Tensor& grad_root) {
  DEMI_CHECK(root.defined(), "backward(): called on an undefined tensor");
  DEMI_CHECK(root.requires_grad(), "backward(): the tensor does not require grad and has no grad_fn; "
             "mark the inputs you want gradients for with requires_grad_() before computing it");
  Tensor grad = grad_root;
  if (!grad.defined()) {
    DEMI_CHECK(root.numel() == 1, "backward(): a gradient can be created implicitly only for a "
               "one-element output, this one has shape ", root.shape(), "; pass grad_output");
    grad = ones_like(root);
  }
  DEMI_CHECK(grad.shape() == root.shape(), "backward(): grad_output of shape ", grad.shape(),
             " does not match the output's shape ", root.shape());
  NoGradGuard no_grad;
  amp::detail::SuspendGuard no_autocast;  // backward formulas run in the dtypes forward saved
  profiler::detail::BackwardPassGuard backward_pass;  // the ops run from here on are backward's
  grad = grad.to(root.dtype()).contiguous(root.suggest_memory_format());

  std::vector<std::function<void()>> callbacks;
  DEMI_CHECK(t_callbacks == nullptr, "backward(): called while another backward pass runs on this thread "
             "(from a hook?); call it after that pass has returned");
  t_callbacks = &callbacks;
  struct ResetCallbacks {
    ~ResetCallbacks() { t_callbacks = nullptr; }
  } reset_callbacks;

  const Edge root_edge = edge_of(root);
  // Dependency counts: how many edges point at each node from inside the graph.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{root_edge.node.get()};
  dependencies[root_edge.node.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next) {
      if (!edge.node) continue;
      auto [it, first_visit] = dependencies.try_emplace(edge.node.get(), 0);
      ++it->second;
      if (first_visit) stack.push_back(edge.node.get());
    }
  }

  std::unordered_map<Node*, Tensor> pending;  // summed gradient waiting at each node
  pending[root_edge.node.get()] = grad;
  std::vector<std::shared_ptr<Node>> ready{root_edge.node};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor grad_output;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      grad_output = std::move(it->second);
      pending.erase(it);
    }
    TensorList grads;
    if (grad_output.defined()) {
      profiler::detail::Span span(node->name(), profiler::Pass::Backward);
      grads = node->apply(grad_output);
      span.wait_for(grad_output);  // same device as the gradients it made
      node->release_saved();
      DEMI_INTERNAL_CHECK(grads.empty() || grads.size() == node->next.size(), node->name(),
                          " backward returned ", grads.size(), " gradients for ", node->next.size(), " inputs");
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node) continue;
      if (i < grads.size() && grads[i].defined()) {
        Tensor g = grads[i];
        DEMI_INTERNAL_CHECK(g.shape() == edge.shape, node->name(), " backward returned a gradient of shape ",
                            g.shape(), " for input ", i, " of shape ", edge.shape);
        g = g.to(edge.dtype);  // e.g. an fp32 parameter cast to fp16 gets an fp32 gradient
        g = g.contiguous(edge.format);  // each op's backward sees its output's format
        Tensor& slot = pending[edge.node.get()];
        slot = slot.defined() ? add(slot, g) : g;
      }
      if (--dependencies[edge.node.get()] == 0) ready.push_back(edge.node);
    }
  }
  // A callback may queue another (it runs in the same pass).
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> fn = std::move(callbacks[i]);
    fn();
  }
}

}  // namespace demi::autograd

// The machinery every op file uses: apply<Op>() runs Op::forward without recording, then, when
// grad mode is on and an input requires grad, records an OpNode<Op> that calls Op::backward.
// An op struct provides kName, kCast (its autocast category), forward and backward. Memory formats:
// an op that declares `static constexpr bool kKeepsMemoryFormat = true` takes channels_last tensors
// as they are; every other op receives its tensor inputs in the contiguous format (apply converts
// them, and records the conversion), so no kernel reads an NHWC tensor as NCHW. Either way backward
// receives grad_output in its output's format (the engine converts gradients at each edge).
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "framework/amp/autocast_apply.h"
#include "framework/amp/category.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/op_context.h"
#include "framework/autograd/profiler.h"
#include "framework/tensor/tensor.h"

namespace demi::ops {

using autograd::OpContext;

template <typename Op>
class OpNode final : public autograd::Node {
 public:
  explicit OpNode(OpContext&& ctx) : ctx_(std::move(ctx)) {}
  const char* name() const override { return Op::kName; }
  TensorList apply(const Tensor& grad_output) override { return Op::backward(ctx_, grad_output); }
  void release_saved() override { ctx_.release(); }

 private:
  OpContext ctx_;
};

namespace detail {
template <typename T> constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, Tensor>;
// A list argument (cat's inputs): each element is a tensor input of the op, in order.
template <typename T> constexpr bool is_tensor_list_v = std::is_same_v<std::decay_t<T>, std::vector<Tensor>>;

template <typename Arg> void collect_tensor(std::vector<const Tensor*>& out, const Arg& arg) {
  if constexpr (is_tensor_v<Arg>) {
    out.push_back(&arg);
  } else if constexpr (is_tensor_list_v<Arg>) {
    for (const Tensor& t : arg) out.push_back(&t);
  }
}

// Under autocast: a tensor argument (or each tensor of a list) cast to the op's target dtype;
// anything else passed through.
template <typename Arg> decltype(auto) autocast_arg(const Arg& arg, DType target) {
  if constexpr (is_tensor_v<Arg>) {
    return amp::detail::autocast_input(arg, target);
  } else if constexpr (is_tensor_list_v<Arg>) {
    std::vector<Tensor> cast;
    for (const Tensor& t : arg) cast.push_back(amp::detail::autocast_input(t, target));
    return cast;
  } else {
    return (arg);
  }
}

template <typename Op, typename = void> struct keeps_memory_format : std::false_type {};
template <typename Op>
struct keeps_memory_format<Op, std::void_t<decltype(Op::kKeepsMemoryFormat)>>
    : std::bool_constant<Op::kKeepsMemoryFormat> {};

template <typename Arg> bool is_channels_last_arg(const Arg& arg) {
  if constexpr (is_tensor_v<Arg>) {
    return arg.defined() && !arg.is_contiguous();
  } else if constexpr (is_tensor_list_v<Arg>) {
    for (const Tensor& t : arg) {
      if (t.defined() && !t.is_contiguous()) return true;
    }
  }
  return false;
}
// A tensor argument (or each tensor of a list) in the contiguous format; anything else as it is.
template <typename Arg> decltype(auto) contiguous_arg(const Arg& arg) {
  if constexpr (is_tensor_v<Arg>) {
    return arg.defined() ? arg.contiguous() : arg;
  } else if constexpr (is_tensor_list_v<Arg>) {
    std::vector<Tensor> out;
    for (const Tensor& t : arg) out.push_back(t.defined() ? t.contiguous() : t);
    return out;
  } else {
    return (arg);
  }
}

template <typename Op, typename... Args>
Tensor apply_recorded(const Args&... args);
template <typename Op, typename... Args>
Tensor apply_in_format(const Args&... args) {
  if constexpr (!keeps_memory_format<Op>::value) {
    if ((is_channels_last_arg(args) || ...)) return apply_recorded<Op>(contiguous_arg(args)...);
  }
  return apply_recorded<Op>(args...);
}
}  // namespace detail

// Runs Op on args (tensors and plain values, in Op::forward's order) and records it for backward.
// Under autocast the tensor inputs are first cast as the op's category says (the casts are
// recorded too, so gradients return in the source dtypes).
template <typename Op, typename... Args>
Tensor apply(const Args&... args) {
  if (amp::detail::any_autocast_enabled()) {
    std::vector<const Tensor*> inputs;
    (detail::collect_tensor(inputs, args), ...);
    DType target;
    if (amp::detail::autocast_target(Op::kCast, inputs, &target)) {
      return detail::apply_in_format<Op>(detail::autocast_arg(args, target)...);
    }
  }
  return detail::apply_in_format<Op>(args...);
}

namespace detail {
template <typename Op, typename... Args>
Tensor apply_recorded(const Args&... args) {
  // Timed here, after the autocast casts, so that they show as rows of their own.
  profiler::detail::Span span(Op::kName, profiler::Pass::Forward);
  std::vector<const Tensor*> inputs;
  (collect_tensor(inputs, args), ...);
  std::vector<bool> needs_grad(inputs.size(), false);
  bool record = false;
  if (is_grad_enabled()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      needs_grad[i] = inputs[i]->defined() && inputs[i]->requires_grad();
      record = record || needs_grad[i];
    }
  }
  OpContext ctx(Op::kName, needs_grad, record);
  Tensor out;
  {
    NoGradGuard no_grad;              // ops used inside forward are not recorded,
    amp::detail::SuspendGuard no_autocast;  // nor autocast again
    out = Op::forward(ctx, args...);
    span.wait_for(out);
  }
  if (record) {
    auto node = std::make_shared<OpNode<Op>>(std::move(ctx));
    node->next.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      DEMI_INTERNAL_CHECK(!out.is_same(*inputs[i]), Op::kName, " forward returned its input itself");
      node->next.push_back(needs_grad[i] ? autograd::edge_of(*inputs[i]) : autograd::Edge{});
    }
    TensorImpl& impl = out.impl_ref();
    impl.requires_grad = true;
    impl.grad_fn = std::move(node);
  }
  return out;
}
}  // namespace detail

// One row of the op table (framework/ops/op_list.h): name and autocast category.
struct OpInfo {
  const char* name;
  amp::Category category;
};
// Every op, in op_list.h order.
const std::vector<OpInfo>& all_ops();

}  // namespace demi::ops

// Placed after an op struct in its .cpp, inside namespace demi::ops: exports its row of the op table.
#define DEMI_REGISTER_OP(Op) \
  OpInfo op_info_##Op() { return {Op::kName, Op::kCast}; }

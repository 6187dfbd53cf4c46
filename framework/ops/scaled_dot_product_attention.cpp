// scaled_dot_product_attention: softmax(scale * q k^T + mask) v over the leading (batch, head) dims,
// torch.nn.functional.scaled_dot_product_attention without dropout. The kernel (attention_forward)
// never stores the scores in the inputs' dtype: half inputs are multiplied with fp32 sums, the
// softmax runs in fp32, and the output is rounded once, so logits past fp16's 65504 stay finite.
// Forward saves q, k, v, the mask, the output and each row's logsumexp (fp32), from which backward
// rebuilds the probabilities, and for half inputs the output's rounding error (out_residual, one more
// half tensor of out's size): with it the backward's D = rowsum(grad_out * output) is as exact as
// PyTorch's fp32 computation on the CPU, without it grad_q and grad_k erred by 2^-9 of
// |grad_out| |out| on their small elements. A floating mask gets the scores' gradient, summed over
// its broadcast.
#include <cmath>

#include "backends/attention_checks.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi::ops {

struct AttentionAttrs {
  bool causal;
  double scale;
};

struct ScaledDotProductAttention {
  static constexpr const char* kName = "scaled_dot_product_attention";
  static constexpr amp::Category kCast = amp::Category::LowerPrecision;

  static Tensor forward(OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        bool causal, double scale) {
    // dtypes are checked here, after autocast has cast the inputs
    DEMI_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kName, ": query, key and value have different "
               "dtypes (", q.dtype(), ", ", k.dtype(), ", ", v.dtype(), "); convert them with .to(dtype) or run "
               "under autocast");
    Shape out_shape = q.shape(), lse_shape = q.shape();
    out_shape.back() = v.size(-1);
    lse_shape.pop_back();
    Tensor out = empty(out_shape, q.dtype(), q.device());
    Tensor lse = empty(lse_shape, backend::attention_stats_dtype(q.dtype()), q.device());
    Tensor residual = is_half(q.dtype()) && ctx.recording() ? empty(out_shape, q.dtype(), q.device()) : Tensor();
    backend::AttentionArgs args;
    args.q = q.ref(), args.k = k.ref(), args.v = v.ref(), args.out = out.ref(), args.logsumexp = lse.ref();
    if (mask.defined()) args.mask = mask.ref();
    if (residual.defined()) args.out_residual = residual.ref();
    args.causal = causal;
    args.scale = scale;
    kernels(q).attention_forward(args);
    for (const Tensor& t : {q, k, v, mask, out, lse, residual}) ctx.save(t);
    ctx.set_attrs(AttentionAttrs{causal, scale});
    return out;
  }

  static TensorList backward(OpContext& ctx, const Tensor& grad_y) {
    const Tensor &q = ctx.saved(0), &k = ctx.saved(1), &v = ctx.saved(2), &mask = ctx.saved(3);
    const Tensor &out = ctx.saved(4), &lse = ctx.saved(5), &residual = ctx.saved(6);
    const AttentionAttrs& attrs = ctx.attrs<AttentionAttrs>();
    backend::AttentionArgs args;
    args.q = q.ref(), args.k = k.ref(), args.v = v.ref(), args.out = out.ref(), args.logsumexp = lse.ref();
    if (mask.defined()) args.mask = mask.ref();
    if (residual.defined()) args.out_residual = residual.ref();
    args.causal = attrs.causal;
    args.scale = attrs.scale;
    const Tensor go = grad_y.dtype() == out.dtype() ? grad_y : grad_y.to(out.dtype());
    args.grad_out = go.ref();
    TensorList grads(4);
    for (size_t i = 0; i < 3; ++i) {
      if (!ctx.needs_grad(i)) continue;
      grads[i] = empty_like(ctx.saved(i));
      (i == 0 ? args.grad_q : i == 1 ? args.grad_k : args.grad_v) = grads[i].ref();
    }
    Tensor scores_grad;  // [..., L, S], the statistics' dtype
    if (ctx.needs_grad(3)) {
      Shape full = q.shape();
      full.back() = k.size(-2);
      scores_grad = empty(full, lse.dtype(), q.device());
      args.grad_mask = scores_grad.ref();
    }
    kernels(q).attention_backward(args);
    if (scores_grad.defined()) grads[3] = sum_to(scores_grad, mask.shape()).to(mask.dtype());
    return grads;
  }
};
DEMI_REGISTER_OP(ScaledDotProductAttention)

}  // namespace demi::ops

namespace demi {
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  ops::check_floating(op, "query", query);
  ops::check_floating(op, "key", key);
  ops::check_floating(op, "value", value);
  ops::check_same_device(op, query, key);
  ops::check_same_device(op, query, value);
  if (attn_mask.defined()) ops::check_same_device(op, query, attn_mask);
  const Shape mask_shape = attn_mask.defined() ? attn_mask.shape() : Shape{};
  backend::attention_geometry(op, query.shape(), key.shape(), value.shape(),
                              attn_mask.defined() ? &mask_shape : nullptr,
                              attn_mask.defined() ? attn_mask.dtype() : DType::U8, is_causal);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  return ops::apply<ops::ScaledDotProductAttention>(query, key, value, attn_mask, is_causal, s);
}
}  // namespace demi

// The argument checks of the attention kernels (backends/kernels.h, AttentionArgs), which every
// backend runs before its own (kernels.cpp), and the geometry they derive. Host-only C++, beside
// kernel_checks.h; scaled_dot_product_attention's own checks (framework/ops) call attention_geometry
// too, so that its messages and the kernels' agree.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace demi::backend {

// The geometry of one attention call: B independent (batch, head) products of L queries against S
// keys, and where the mask's element (b, i, j) lies: mask_offset(b) + i * mask_l + j * mask_s
// (strides 0 along the dims the mask broadcasts over).
struct AttnGeom {
  int64_t batch = 1, L = 0, S = 0, E = 0, Ev = 0;
  Shape lead;                         // q's leading dims, whose product is batch
  bool has_mask = false, bool_mask = false;
  std::vector<int64_t> mask_lead;     // the mask's stride along each leading dim
  int64_t mask_l = 0, mask_s = 0;
  int64_t mask_offset(int64_t b) const {
    int64_t offset = 0;
    for (size_t d = lead.size(); d-- > 0;) {
      offset += (b % lead[d]) * mask_lead[d];
      b /= lead[d];
    }
    return offset;
  }
};

// The statistics' dtype (logsumexp, grad_mask): F64 for F64 inputs, else F32.
inline DType attention_stats_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

// The shapes of q [..., L, E], k [..., S, E], v [..., S, Ev] and a mask broadcastable to [..., L, S]
// (mask_shape null: none), checked and turned into the geometry; `op` names the caller in messages.
inline AttnGeom attention_geometry(const char* op, const Shape& q, const Shape& k, const Shape& v,
                                   const Shape* mask_shape, DType mask_dtype, bool causal) {
  DEMI_CHECK(q.size() >= 3 && k.size() == q.size() && v.size() == q.size(), op, ": query ", q, ", key ", k,
             " and value ", v, " must have one rank of at least 3: [..., L, E], [..., S, E], [..., S, Ev] with "
             "leading (batch, head) dims; reshape a single product to [1, L, E]");
  const size_t r = q.size();
  const Shape lead(q.begin(), q.end() - 2);
  DEMI_CHECK(Shape(k.begin(), k.end() - 2) == lead && Shape(v.begin(), v.end() - 2) == lead, op, ": query ", q,
             ", key ", k, " and value ", v, " must share their leading (batch, head) dims ", lead);
  DEMI_CHECK(k[r - 1] == q[r - 1], op, ": query ", q, " and key ", k, " must share the embedding size E (their last "
             "dim): ", q[r - 1], " vs ", k[r - 1]);
  DEMI_CHECK(v[r - 2] == k[r - 2], op, ": key ", k, " and value ", v, " must hold as many positions S (the "
             "second-to-last dim): ", k[r - 2], " vs ", v[r - 2]);
  AttnGeom g;
  g.lead = lead;
  g.batch = shape_numel(lead);
  g.L = q[r - 2], g.S = k[r - 2], g.E = q[r - 1], g.Ev = v[r - 1];
  if (!mask_shape) return g;
  DEMI_CHECK(!causal, op, ": attn_mask and is_causal are both set; give one (a causal mask can be built as "
             "attn_mask, or pass is_causal alone)");
  const Shape& m = *mask_shape;
  DEMI_CHECK(mask_dtype == DType::U8 || is_floating(mask_dtype), op, ": attn_mask must be uint8 (1: take part, "
             "as a bool mask) or floating (added to the scores), got ", mask_dtype);
  Shape full = lead;
  full.push_back(g.L);
  full.push_back(g.S);
  bool fits = m.size() <= r;
  std::vector<int64_t> stride(r, 0);
  for (size_t i = 0, s = 1; fits && i < m.size(); ++i) {  // from the last dim
    const size_t dm = m.size() - 1 - i, df = r - 1 - i;
    fits = m[dm] == 1 || m[dm] == full[df];
    stride[df] = m[dm] == 1 ? 0 : static_cast<int64_t>(s);
    s *= static_cast<size_t>(m[dm]);
  }
  DEMI_CHECK(fits, op, ": attn_mask ", m, " does not broadcast to the scores' shape ", full, " ([..., L, S])");
  g.has_mask = true;
  g.bool_mask = mask_dtype == DType::U8;
  g.mask_lead.assign(stride.begin(), stride.end() - 2);
  g.mask_l = stride[r - 2], g.mask_s = stride[r - 1];
  return g;
}

inline AttnGeom check_attention_forward(const AttentionArgs& a) {
  const char* op = "attention_forward";
  const AttnGeom g = attention_geometry(op, a.q.shape, a.k.shape, a.v.shape, a.mask.defined() ? &a.mask.shape : nullptr,
                                        a.mask.dtype, a.causal);
  DEMI_CHECK(is_floating(a.q.dtype) && a.k.dtype == a.q.dtype && a.v.dtype == a.q.dtype, op, ": query, key and value "
             "must share one floating dtype, got ", a.q.dtype, ", ", a.k.dtype, " and ", a.v.dtype);
  Shape out = g.lead, lse = g.lead;
  out.push_back(g.L), out.push_back(g.Ev), lse.push_back(g.L);
  DEMI_CHECK(a.out.shape == out && a.out.dtype == a.q.dtype, op, ": out must be ", out, " ", a.q.dtype, ", got ",
             a.out.shape, " ", a.out.dtype);
  const DType stats = attention_stats_dtype(a.q.dtype);
  DEMI_CHECK(a.logsumexp.shape == lse && a.logsumexp.dtype == stats, op, ": logsumexp must be ", lse, " ", stats,
             ", got ", a.logsumexp.shape, " ", a.logsumexp.dtype);
  DEMI_CHECK(!a.out_residual.defined() || (a.out_residual.shape == out && a.out_residual.dtype == a.q.dtype &&
                                           is_half(a.q.dtype)),
             op, ": out_residual must be ", out, " of a half dtype like out, got ", a.out_residual.shape, " ",
             a.out_residual.dtype, " for ", a.q.dtype, " inputs");
  return g;
}

inline AttnGeom check_attention_backward(const AttentionArgs& a) {
  const char* op = "attention_backward";
  const AttnGeom g = check_attention_forward(a);
  DEMI_CHECK(a.grad_out.shape == a.out.shape && a.grad_out.dtype == a.out.dtype, op, ": grad_out must be ",
             a.out.shape, " ", a.out.dtype, ", got ", a.grad_out.shape, " ", a.grad_out.dtype);
  for (const auto& [grad, like, name] : {std::tuple{&a.grad_q, &a.q, "grad_q"}, std::tuple{&a.grad_k, &a.k, "grad_k"},
                                         std::tuple{&a.grad_v, &a.v, "grad_v"}}) {
    DEMI_CHECK(!grad->defined() || (grad->shape == like->shape && grad->dtype == like->dtype), op, ": ", name,
               " must be ", like->shape, " ", like->dtype, ", got ", grad->shape, " ", grad->dtype);
  }
  if (a.grad_mask.defined()) {
    Shape full = g.lead;
    full.push_back(g.L), full.push_back(g.S);
    const DType stats = attention_stats_dtype(a.q.dtype);
    DEMI_CHECK(g.has_mask && !g.bool_mask, op, ": grad_mask needs a floating mask");
    DEMI_CHECK(a.grad_mask.shape == full && a.grad_mask.dtype == stats, op, ": grad_mask must be ", full, " ", stats,
               ", got ", a.grad_mask.shape, " ", a.grad_mask.dtype);
  }
  return g;
}

}  // namespace demi::backend

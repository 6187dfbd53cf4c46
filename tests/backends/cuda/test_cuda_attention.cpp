// Pins backends/cuda/attention.cu to the fp64 reference the CPU kernels are held to
// (support/attention_reference.h): forward and backward over the same cases (tile tails, odd E,
// bool and additive masks broadcast several ways, causal rows with L < S and L > S), every floating
// dtype; a row in which no key takes part gives 0; fp16 logits past 65504 stay finite.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "support/attention_reference.h"

namespace demi::backend {
namespace {

using namespace cuda_test;
using test::AttnCase;
using test::AttnMask;
using test::AttnValues;
using test::with;

DType stats_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// One case on cuda:0: its inputs (as stored in `dtype`), forward and backward, results read back.
struct GpuRun {
  AttnValues stored;
  std::vector<double> out, lse, gq, gk, gv, gmask;
};

GpuRun run_on_gpu(const AttnCase& c, DType dtype, const AttnValues& drawn, double scale) {
  const DType mask_dtype = test::attention_mask_dtype(c, dtype);
  const Shape qs = with(c.lead, c.L, c.E), ks = with(c.lead, c.S, c.E), vs = with(c.lead, c.S, c.Ev);
  const Shape os = with(c.lead, c.L, c.Ev), ms = test::attention_mask_shape(c), full = with(c.lead, c.L, c.S);
  Shape ls = c.lead;
  ls.push_back(c.L);
  const Buffer q(gpu(), encode(drawn.q, dtype)), k(gpu(), encode(drawn.k, dtype)), v(gpu(), encode(drawn.v, dtype));
  const Buffer mask(gpu(), encode(drawn.mask, mask_dtype)), go(gpu(), encode(drawn.go, dtype));
  const size_t elem = dtype_size(dtype), stat = dtype_size(stats_of(dtype));
  Buffer out(gpu(), shape_numel(os) * elem), lse(gpu(), shape_numel(ls) * stat), gmask(gpu(), shape_numel(full) * stat);
  Buffer residual(gpu(), shape_numel(os) * elem);
  Buffer gq(gpu(), shape_numel(qs) * elem), gk(gpu(), shape_numel(ks) * elem), gv(gpu(), shape_numel(vs) * elem);
  AttentionArgs a;
  a.q = q.ref(qs, dtype), a.k = k.ref(ks, dtype), a.v = v.ref(vs, dtype);
  if (c.mask != AttnMask::None) a.mask = mask.ref(ms, mask_dtype);
  a.out = out.ref(os, dtype), a.logsumexp = lse.ref(ls, stats_of(dtype));
  if (is_half(dtype)) a.out_residual = residual.ref(os, dtype);  // as the op passes it
  a.causal = c.causal, a.scale = scale;
  gpu().attention_forward(a);
  a.grad_out = go.ref(os, dtype);
  a.grad_q = gq.ref(qs, dtype), a.grad_k = gk.ref(ks, dtype), a.grad_v = gv.ref(vs, dtype);
  if (c.mask == AttnMask::Additive) a.grad_mask = gmask.ref(full, stats_of(dtype));
  gpu().attention_backward(a);
  GpuRun r;
  r.stored = {decode(encode(drawn.q, dtype), dtype), decode(encode(drawn.k, dtype), dtype),
              decode(encode(drawn.v, dtype), dtype), decode(encode(drawn.mask, mask_dtype), mask_dtype),
              decode(encode(drawn.go, dtype), dtype)};
  r.out = decode(out.read(), dtype), r.lse = decode(lse.read(), stats_of(dtype));
  r.gq = decode(gq.read(), dtype), r.gk = decode(gk.read(), dtype), r.gv = decode(gv.read(), dtype);
  if (c.mask == AttnMask::Additive) r.gmask = decode(gmask.read(), stats_of(dtype));
  return r;
}

TEST(CudaAttention, MatchesFp64Reference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType dtype : kFloatDTypes) {
    for (const AttnCase& c : test::attention_cases()) {
      SCOPED_TRACE(test::describe(c, dtype));
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
      const GpuRun g = run_on_gpu(c, dtype, test::draw_attention(c, 77), scale);
      const test::AttnReference r = test::attention_reference(c, g.stored, scale);
      expect_close(g.out, r.out, test::attention_tolerances(dtype, c.S, r.out), "out");
      expect_close(g.gv, r.gv, test::attention_tolerances(dtype, c.L, r.gv), "grad_v");
      expect_close(g.gq, r.gq, test::attention_tolerances(dtype, c.S * c.Ev, r.gq), "grad_q");
      expect_close(g.gk, r.gk, test::attention_tolerances(dtype, c.L * c.Ev, r.gk), "grad_k");
      if (c.mask == AttnMask::Additive) {
        expect_close(g.gmask, r.gmask, test::attention_tolerances(stats_of(dtype), c.Ev, r.gmask), "grad_mask");
      }
    }
  }
}

// A row in which no key takes part: 0 out, 0 gradients, as on the CPU.
TEST(CudaAttention, RowWithNoKeyGivesZero) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const AttnCase c{"masked_row", {1}, 4, 6, 3, 2, AttnMask::Bool, {4, 6}, false};
  AttnValues drawn = test::draw_attention(c, 5);
  for (size_t j = 0; j < 6; ++j) drawn.mask[6 * 2 + j] = 0, drawn.mask[j] = 1;
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const GpuRun g = run_on_gpu(c, dtype, drawn, 0.5);
    for (size_t e = 0; e < 2; ++e) EXPECT_EQ(g.out[2 * 2 + e], 0.0) << "out[2][" << e << "]";
    for (size_t e = 0; e < 3; ++e) EXPECT_EQ(g.gq[2 * 3 + e], 0.0) << "grad_q[2][" << e << "]";
    EXPECT_NE(g.out[0], 0.0);
  }
}

// fp16 q = k = 300, E = 1, scale 1: logits of 90000 are kept in fp32, never in fp16.
TEST(CudaAttention, Fp16LogitsPast65504StayFinite) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const AttnCase c{"overflow", {1}, 2, 3, 1, 2, AttnMask::None, {}, false};
  AttnValues drawn = test::draw_attention(c, 6);
  drawn.q.assign(2, 300.0), drawn.k.assign(3, 300.0), drawn.v = {0, 1, 2, 3, 4, 5};
  const GpuRun g = run_on_gpu(c, DType::F16, drawn, 1.0);
  expect_close(g.out, {2.0, 3.0, 2.0, 3.0}, rounded(DType::F16), "out");
  expect_close(g.lse, {90000.0 + std::log(3.0), 90000.0 + std::log(3.0)}, rounded(DType::F32), "logsumexp");
  for (double x : g.gq) EXPECT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace demi::backend

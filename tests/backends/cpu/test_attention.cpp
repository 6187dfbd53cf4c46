// Pins the CPU attention kernels (backends/cpu/attention.cpp, attention_backward.cpp) to a plain fp64
// loop: forward and backward over shapes whose L and S are not multiples of the tiles and whose E is
// odd, bool and additive masks broadcast in several ways, causal rows with L < S and L > S, rows in
// which no key takes part, every floating dtype, once per ISA level (bf16 takes the level's bf16
// tile where it has one). Also: fp16 logits past 65504 stay finite, and the kernels' scratch grows
// with L * E, not L * S.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/attention_reference.h"
#include "support/host_tensor.h"

namespace demi::backend {
namespace {

using test::AttnCase;
using test::AttnMask;
using test::AttnValues;
using test::with;

// A case's inputs in HostTensors of `dtype`, and the values they hold.
struct Inputs {
  HostTensor q, k, v, mask, go;
  AttnValues stored;
  Inputs(const AttnCase& c, DType dtype, unsigned seed)
      : q(dtype, with(c.lead, c.L, c.E)), k(dtype, with(c.lead, c.S, c.E)), v(dtype, with(c.lead, c.S, c.Ev)),
        mask(test::attention_mask_dtype(c, dtype), test::attention_mask_shape(c)), go(dtype, with(c.lead, c.L, c.Ev)) {
    const AttnValues drawn = test::draw_attention(c, seed);
    HostTensor* tensors[] = {&q, &k, &v, &mask, &go};
    const std::vector<double>* values[] = {&drawn.q, &drawn.k, &drawn.v, &drawn.mask, &drawn.go};
    std::vector<double>* kept[] = {&stored.q, &stored.k, &stored.v, &stored.mask, &stored.go};
    for (int t = 0; t < 5; ++t) {
      for (int64_t i = 0; i < tensors[t]->numel(); ++i) tensors[t]->set(i, (*values[t])[static_cast<size_t>(i)]);
      *kept[t] = tensors[t]->values();
    }
  }
  AttentionArgs args(const AttnCase& c) {
    AttentionArgs a;
    a.q = q.ref(), a.k = k.ref(), a.v = v.ref();
    if (c.mask != AttnMask::None) a.mask = mask.ref();
    a.causal = c.causal;
    a.scale = 1.0 / std::sqrt(static_cast<double>(c.E));
    return a;
  }
};

DType stats_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

std::vector<Tolerance> tolerances(DType dtype, int64_t terms, const std::vector<double>& want) {
  return test::attention_tolerances(dtype, terms, want);
}

void run_case(const AttnCase& c, DType dtype) {
  SCOPED_TRACE(test::describe(c, dtype));
  Inputs in(c, dtype, 77);
  HostTensor out(dtype, with(c.lead, c.L, c.Ev)), lse(stats_of(dtype), with(c.lead, c.L, 1));
  HostTensor residual(dtype, out.shape);
  lse.shape.pop_back();
  AttentionArgs a = in.args(c);
  a.out = out.ref(), a.logsumexp = lse.ref();
  if (is_half(dtype)) a.out_residual = residual.ref();  // as the op passes it
  Kernels& cpu = kernels_for(Device::cpu());
  cpu.attention_forward(a);

  HostTensor gq(dtype, in.q.shape), gk(dtype, in.k.shape), gv(dtype, in.v.shape);
  HostTensor gmask(stats_of(dtype), with(c.lead, c.L, c.S));
  a.grad_out = in.go.ref(), a.grad_q = gq.ref(), a.grad_k = gk.ref(), a.grad_v = gv.ref();
  if (c.mask == AttnMask::Additive) a.grad_mask = gmask.ref();
  cpu.attention_backward(a);

  const test::AttnReference r = test::attention_reference(c, in.stored, a.scale);
  demi::test::expect_close(out.values(), r.out, tolerances(dtype, c.S, r.out), "out");
  demi::test::expect_close(gv.values(), r.gv, tolerances(dtype, c.L, r.gv), "grad_v");
  demi::test::expect_close(gq.values(), r.gq, tolerances(dtype, c.S * c.Ev, r.gq), "grad_q");
  demi::test::expect_close(gk.values(), r.gk, tolerances(dtype, c.L * c.Ev, r.gk), "grad_k");
  if (c.mask == AttnMask::Additive) {
    // fp32 (fp64), but for half inputs D = rowsum(grad_out * (out + residual)) sees the output to
    // (eps / 2)^2 of each term (|grad_out| <= 1, |out| <= 1.5).
    std::vector<Tolerance> t = tolerances(stats_of(dtype), c.Ev, r.gmask);
    const double extra = is_half(dtype) ? 1.5 * c.Ev * std::pow(test::epsilon(dtype) / 2, 2) : 0.0;
    for (Tolerance& e : t) e.atol += extra;
    demi::test::expect_close(gmask.values(), r.gmask, t, "grad_mask");
  }
}

using demi_test::Level;
class AttentionParity : public demi_test::IsaFixture<std::tuple<Level, DType>> {};

TEST_P(AttentionParity, MatchesFp64Reference) {
  for (const AttnCase& c : test::attention_cases()) run_case(c, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(IsaDtypes, AttentionParity,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

// A row in which no key takes part (a bool mask all 0 there): 0 out, 0 gradients, as torch's CPU
// kernels give; the other rows as usual.
TEST_P(AttentionParity, RowWithNoKeyGivesZero) {
  const DType dtype = std::get<1>(GetParam());
  const AttnCase c{"masked_row", {1}, 4, 6, 3, 2, AttnMask::Bool, {4, 6}, false};
  Inputs in(c, dtype, 5);
  for (int64_t j = 0; j < 6; ++j) in.mask.set(6 * 2 + j, 0), in.mask.set(6 * 0 + j, 1);
  in.stored.mask = in.mask.values();
  HostTensor out(dtype, {1, 4, 2}), lse(stats_of(dtype), {1, 4}), residual(dtype, {1, 4, 2});
  AttentionArgs a = in.args(c);
  a.out = out.ref(), a.logsumexp = lse.ref();
  if (is_half(dtype)) a.out_residual = residual.ref();
  kernels_for(Device::cpu()).attention_forward(a);
  HostTensor gq(dtype, in.q.shape), gk(dtype, in.k.shape), gv(dtype, in.v.shape);
  a.grad_out = in.go.ref(), a.grad_q = gq.ref(), a.grad_k = gk.ref(), a.grad_v = gv.ref();
  kernels_for(Device::cpu()).attention_backward(a);
  for (int64_t e = 0; e < 2; ++e) EXPECT_EQ(out.get(2 * 2 + e), 0.0) << "out[2][" << e << "]";
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(gq.get(2 * 3 + e), 0.0) << "grad_q[2][" << e << "]";
  EXPECT_NE(out.get(0), 0.0);  // row 0 sees every key
  const test::AttnReference r = test::attention_reference(c, in.stored, a.scale);
  demi::test::expect_close(gk.values(), r.gk, tolerances(dtype, c.L * c.Ev, r.gk), "grad_k");
}

// Without out_residual a half backward takes D = rowsum(grad_out * out) from the rounded output,
// which puts an error of about 2^-9 |grad_out| |out| into every score gradient of the row, large
// beside grad_q's small elements. Measured as crosscheck/compare.py does (relative, with a floor of
// 1e-3 of the largest |value|), grad_q then misses the fp64 reference many times more than by the
// one rounding it keeps with the residual (PyTorch's CPU result, which computes in fp32).
TEST_P(AttentionParity, HalfGradientsNeedTheOutputsResidual) {
  const DType dtype = std::get<1>(GetParam());
  if (!is_half(dtype)) GTEST_SKIP() << "fp32 and fp64 outputs are exact enough";
  const AttnCase c = test::attention_cases()[1];  // tile_tails
  double worst[2] = {0, 0};  // without, with the residual
  for (int with_residual = 0; with_residual < 2; ++with_residual) {
    Inputs in(c, dtype, 77);
    HostTensor out(dtype, with(c.lead, c.L, c.Ev)), lse(stats_of(dtype), {shape_numel(c.lead) * c.L});
    HostTensor residual(dtype, out.shape), gq(dtype, in.q.shape);
    AttentionArgs a = in.args(c);
    a.out = out.ref(), a.logsumexp = lse.ref();
    a.logsumexp.shape = with(c.lead, c.L, 1), a.logsumexp.shape.pop_back();
    if (with_residual) a.out_residual = residual.ref();
    kernels_for(Device::cpu()).attention_forward(a);
    a.grad_out = in.go.ref(), a.grad_q = gq.ref();
    kernels_for(Device::cpu()).attention_backward(a);
    const test::AttnReference r = test::attention_reference(c, in.stored, a.scale);
    double floor = 0;
    for (double w : r.gq) floor = std::max(floor, 1e-3 * std::fabs(w));
    for (int64_t i = 0; i < gq.numel(); ++i) {
      const double want = r.gq[static_cast<size_t>(i)];
      const double error = std::fabs(gq.get(i) - want) / std::max(std::fabs(want), floor);
      worst[with_residual] = std::max(worst[with_residual], error);
    }
  }
  EXPECT_LE(worst[1], test::epsilon(dtype)) << "with the residual";
  EXPECT_GT(worst[0], 4 * worst[1]) << "grad_q's relative error: " << worst[0] << " from out alone, " << worst[1]
                                    << " with its residual";
}

// fp16 q = k = 300 with E = 1: the logit is 90000, past fp16's 65504. Stored in fp16 it would be
// inf (and the softmax NaN); the kernel keeps it in fp32, so out is the values' mean, finite.
TEST_P(AttentionParity, Fp16LogitsPast65504StayFinite) {
  if (std::get<1>(GetParam()) != DType::F16) GTEST_SKIP() << "fp16's range";
  HostTensor q(DType::F16, {1, 2, 1}), k(DType::F16, {1, 3, 1}), v(DType::F16, {1, 3, 2});
  q.fill(300.0), k.fill(300.0);
  for (int64_t i = 0; i < 6; ++i) v.set(i, static_cast<double>(i));
  HostTensor out(DType::F16, {1, 2, 2}), lse(DType::F32, {1, 2});
  AttentionArgs a;
  a.q = q.ref(), a.k = k.ref(), a.v = v.ref(), a.out = out.ref(), a.logsumexp = lse.ref(), a.scale = 1.0;
  kernels_for(Device::cpu()).attention_forward(a);
  expect_close(out, {2.0, 3.0, 2.0, 3.0}, rounded(DType::F16));
  expect_close(lse, {90000.0 + std::log(3.0), 90000.0 + std::log(3.0)}, rounded(DType::F32));
}

// Working memory: a pass over L = S = 1024 keeps tiles, not the scores: its per-thread scratch is
// a fraction of one head's fp32 L x S matrix (4 MiB; forward takes 0.2 MiB, backward 0.5 MiB, half of
// it grad_q's L x E accumulator), and it does not grow with S.
TEST(CpuAttention, ScratchStaysWithinTiles) {
  const int64_t L = 1024, S = 1024, E = 64;
  const size_t scores = static_cast<size_t>(L * S) * sizeof(float);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto pass : {cpu::attention::Pass::Forward, cpu::attention::Pass::Backward}) {
      const size_t bytes = cpu::attention::scratch_bytes(pass, dtype, L, S, E, E);
      EXPECT_LT(bytes * 6, scores) << dtype << (pass == cpu::attention::Pass::Forward ? " forward" : " backward")
                                   << ": " << bytes << " bytes of scratch";
    }
  }
  EXPECT_EQ(cpu::attention::scratch_bytes(cpu::attention::Pass::Backward, DType::F32, L, 64, E, E),
            cpu::attention::scratch_bytes(cpu::attention::Pass::Backward, DType::F32, L, 1 << 20, E, E));
}

TEST(CpuAttention, RejectsBadShapesAndArguments) {
  HostTensor q(DType::F32, {2, 4, 3}), k(DType::F32, {2, 5, 3}), v(DType::F32, {2, 5, 6}), out(DType::F32, {2, 4, 6});
  HostTensor lse(DType::F32, {2, 4}), k_bad(DType::F32, {2, 5, 4}), v_bad(DType::F32, {2, 6, 6});
  HostTensor mask_bad(DType::U8, {3, 5}), mask(DType::U8, {4, 5}), q_half(DType::F16, {2, 4, 3});
  Kernels& cpu = kernels_for(Device::cpu());
  auto args = [&] {
    AttentionArgs a;
    a.q = q.ref(), a.k = k.ref(), a.v = v.ref(), a.out = out.ref(), a.logsumexp = lse.ref();
    return a;
  };
  AttentionArgs a = args();
  a.k = k_bad.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);  // E differs
  a = args(), a.v = v_bad.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);  // S differs
  a = args(), a.mask = mask_bad.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);  // does not broadcast
  a = args(), a.mask = mask.ref(), a.causal = true;
  EXPECT_THROW(cpu.attention_forward(a), Error);  // both
  a = args(), a.q = q_half.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);  // dtypes differ
  a = args(), a.logsumexp = out.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);
  HostTensor flat(DType::F32, {4, 3});
  a = args(), a.q = flat.ref();
  EXPECT_THROW(cpu.attention_forward(a), Error);  // no leading dim
}

}  // namespace
}  // namespace demi::backend

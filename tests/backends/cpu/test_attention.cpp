// Pins the CPU attention kernels (backends/cpu/attention.cpp, attention_backward.cpp) to a plain fp64
// loop: forward and backward over shapes whose L and S are not multiples of the tiles and whose E is
// odd, bool and additive masks broadcast in several ways, causal rows with L < S and L > S, rows in
// which no key takes part, every floating dtype, once per ISA level (bf16 takes the level's bf16
// tile where it has one). Also: fp16 logits past 65504 stay finite, and the kernels' scratch grows
// with L * E, not L * S.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace demi::backend {
namespace {

enum class Mask { None, Bool, Additive };

struct Case {
  const char* name;
  Shape lead;
  int64_t L, S, E, Ev;
  Mask mask;
  Shape mask_shape;  // broadcastable to lead + [L, S]
  bool causal;
};

const Case kCases[] = {
    {"tiny", {2}, 3, 5, 3, 4, Mask::None, {}, false},
    {"tile_tails", {2, 2}, 70, 130, 17, 9, Mask::None, {}, false},
    {"one_head_long_keys", {1}, 65, 300, 64, 64, Mask::None, {}, false},
    {"bool_mask_per_head", {2, 2}, 67, 131, 5, 7, Mask::Bool, {2, 2, 67, 131}, false},
    {"bool_key_padding", {3, 2}, 9, 140, 8, 8, Mask::Bool, {3, 1, 1, 140}, false},
    {"additive_mask_shared", {2, 3}, 66, 20, 6, 5, Mask::Additive, {66, 20}, false},
    {"additive_mask_per_query", {2}, 70, 129, 4, 3, Mask::Additive, {2, 70, 1}, false},
    {"causal_fewer_queries", {2, 2}, 40, 150, 7, 5, Mask::None, {}, true},
    {"causal_more_queries", {3}, 150, 70, 9, 6, Mask::None, {}, true},
    {"causal_square", {1, 2}, 129, 129, 16, 16, Mask::None, {}, true},
};

std::string describe(const Case& c, DType dtype) {
  std::ostringstream out;
  out << c.name << " " << dtype << " lead=" << Shape(c.lead) << " L=" << c.L << " S=" << c.S << " E=" << c.E
      << " Ev=" << c.Ev << " causal=" << c.causal;
  return out.str();
}

Shape with(Shape lead, int64_t a, int64_t b) {
  lead.push_back(a);
  lead.push_back(b);
  return lead;
}

// The mask's value at (batch index bi, query i, key j) by numpy broadcasting, as an additive term.
double mask_term(const Case& c, const HostTensor& mask, int64_t bi, int64_t i, int64_t j) {
  if (c.mask == Mask::None) return 0.0;
  Shape full = with(c.lead, c.L, c.S);
  std::vector<int64_t> index(full.size());
  index[full.size() - 1] = j, index[full.size() - 2] = i;
  for (size_t d = c.lead.size(); d-- > 0;) index[d] = bi % c.lead[d], bi /= c.lead[d];
  int64_t at = 0;
  const size_t skip = full.size() - c.mask_shape.size();
  for (size_t d = 0; d < c.mask_shape.size(); ++d) at = at * c.mask_shape[d] + (c.mask_shape[d] == 1 ? 0 : index[skip + d]);
  const double m = mask.get(at);
  return c.mask == Mask::Bool ? (m != 0 ? 0.0 : -INFINITY) : m;
}

// The fp64 reference: probabilities of each (batch, query) row, or all zeros where no key takes part.
struct Reference {
  std::vector<double> p, out, gq, gk, gv, gmask;
};

Reference reference(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& mask,
                    const HostTensor* out, const HostTensor* go, double scale) {
  const int64_t B = shape_numel(c.lead), L = c.L, S = c.S, E = c.E, Ev = c.Ev;
  Reference r;
  r.p.assign(B * L * S, 0.0), r.out.assign(B * L * Ev, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q.get((b * L + i) * E + e) * k.get((b * S + j) * E + e);
        s[j] = (c.causal && j > i) ? -INFINITY : scale * dot + mask_term(c, mask, b, i, j);
        m = std::max(m, s[j]);
      }
      if (m == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += std::exp(s[j] - m);
      for (int64_t j = 0; j < S; ++j) {
        const double p = std::exp(s[j] - m) / sum;
        r.p[(b * L + i) * S + j] = p;
        for (int64_t e = 0; e < Ev; ++e) r.out[(b * L + i) * Ev + e] += p * v.get((b * S + j) * Ev + e);
      }
    }
  }
  if (!go) return r;
  r.gq.assign(B * L * E, 0.0), r.gk.assign(B * S * E, 0.0), r.gv.assign(B * S * Ev, 0.0), r.gmask.assign(B * L * S, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      double d = 0;  // from the stored output, which backward reads
      for (int64_t e = 0; e < Ev; ++e) d += go->get((b * L + i) * Ev + e) * out->get((b * L + i) * Ev + e);
      for (int64_t j = 0; j < S; ++j) {
        const double p = r.p[(b * L + i) * S + j];
        double dp = 0;
        for (int64_t e = 0; e < Ev; ++e) {
          dp += go->get((b * L + i) * Ev + e) * v.get((b * S + j) * Ev + e);
          r.gv[(b * S + j) * Ev + e] += p * go->get((b * L + i) * Ev + e);
        }
        const double ds = p * (dp - d);
        r.gmask[(b * L + i) * S + j] = ds;
        for (int64_t e = 0; e < E; ++e) {
          r.gq[(b * L + i) * E + e] += scale * ds * k.get((b * S + j) * E + e);
          r.gk[(b * S + j) * E + e] += scale * ds * q.get((b * L + i) * E + e);
        }
      }
    }
  }
  return r;
}

// Draws the case's inputs: q, k, v uniform in [-1.5, 1.5) (logits of a few units), a bool mask with
// about a third of the keys out and row 1 of each mask plane out entirely, an additive mask of
// normal values with some -inf.
struct Inputs {
  HostTensor q, k, v, mask;
  Inputs(const Case& c, DType dtype, std::mt19937& rng)
      : q(dtype, with(c.lead, c.L, c.E)), k(dtype, with(c.lead, c.S, c.E)), v(dtype, with(c.lead, c.S, c.Ev)),
        mask(c.mask == Mask::Bool ? DType::U8 : dtype, c.mask == Mask::None ? Shape{1} : c.mask_shape) {
    q.fill_random(rng, -1.5, 1.5), k.fill_random(rng, -1.5, 1.5), v.fill_random(rng, -1.5, 1.5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::normal_distribution<double> n(0.0, 2.0);
    const int64_t cols = c.mask_shape.empty() ? 1 : c.mask_shape.back();
    const int64_t rows = c.mask_shape.size() < 2 ? 1 : c.mask_shape[c.mask_shape.size() - 2];
    for (int64_t at = 0; at < mask.numel(); ++at) {
      const bool row_one = rows > 1 && (at / cols) % rows == 1;
      if (c.mask == Mask::Bool) mask.set(at, !row_one && u(rng) > 0.35 ? 1 : 0);
      if (c.mask == Mask::Additive) mask.set(at, u(rng) < 0.1 ? -INFINITY : n(rng));
    }
  }
  AttentionArgs args(const Case& c) {
    AttentionArgs a;
    a.q = q.ref(), a.k = k.ref(), a.v = v.ref();
    if (c.mask != Mask::None) a.mask = mask.ref();
    a.causal = c.causal;
    a.scale = 1.0 / std::sqrt(static_cast<double>(c.E));
    return a;
  }
};

DType stats_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// Sums of `terms` products accumulated in fp32 (fp64): the accumulated row (support/tolerance.h),
// its absolute part taken relative to the result's scale (its largest |value|, at least 1), since
// the softmax and the score gradients (P (dP - D)) cancel terms of that size.
std::vector<Tolerance> tolerances(DType dtype, int64_t terms, const std::vector<double>& want) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  Tolerance t = accumulated(dtype, terms);
  t.atol *= std::max(scale, 1.0);
  return std::vector<Tolerance>(want.size(), t);
}

void run_case(const Case& c, DType dtype) {
  SCOPED_TRACE(describe(c, dtype));
  std::mt19937 rng(77);
  Inputs in(c, dtype, rng);
  HostTensor out(dtype, with(c.lead, c.L, c.Ev)), lse(stats_of(dtype), with(c.lead, c.L, 1));
  lse.shape.pop_back();
  AttentionArgs a = in.args(c);
  a.out = out.ref(), a.logsumexp = lse.ref();
  Kernels& cpu = kernels_for(Device::cpu());
  cpu.attention_forward(a);

  HostTensor go(dtype, out.shape), gq(dtype, in.q.shape), gk(dtype, in.k.shape), gv(dtype, in.v.shape);
  HostTensor gmask(stats_of(dtype), with(c.lead, c.L, c.S));
  go.fill_random(rng, -1.0, 1.0);
  a.grad_out = go.ref(), a.grad_q = gq.ref(), a.grad_k = gk.ref(), a.grad_v = gv.ref();
  if (c.mask == Mask::Additive) a.grad_mask = gmask.ref();
  cpu.attention_backward(a);

  const Reference r = reference(c, in.q, in.k, in.v, in.mask, &out, &go, a.scale);
  demi::test::expect_close(out.values(), r.out, tolerances(dtype, c.S, r.out), "out");
  demi::test::expect_close(gv.values(), r.gv, tolerances(dtype, c.L, r.gv), "grad_v");
  demi::test::expect_close(gq.values(), r.gq, tolerances(dtype, c.S * c.Ev, r.gq), "grad_q");
  demi::test::expect_close(gk.values(), r.gk, tolerances(dtype, c.L * c.Ev, r.gk), "grad_k");
  if (c.mask == Mask::Additive) {
    demi::test::expect_close(gmask.values(), r.gmask, tolerances(stats_of(dtype), c.Ev, r.gmask), "grad_mask");
  }
}

using demi_test::Level;
class AttentionParity : public demi_test::IsaFixture<std::tuple<Level, DType>> {};

TEST_P(AttentionParity, MatchesFp64Reference) {
  for (const Case& c : kCases) run_case(c, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(IsaDtypes, AttentionParity,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

// A row in which no key takes part (a bool mask all 0 there): 0 out, 0 gradients, as torch's CPU
// kernels give; the other rows as usual.
TEST_P(AttentionParity, RowWithNoKeyGivesZero) {
  const DType dtype = std::get<1>(GetParam());
  const Case c{"masked_row", {1}, 4, 6, 3, 2, Mask::Bool, {4, 6}, false};
  std::mt19937 rng(5);
  Inputs in(c, dtype, rng);
  for (int64_t j = 0; j < 6; ++j) in.mask.set(6 * 2 + j, 0), in.mask.set(6 * 0 + j, 1);
  HostTensor out(dtype, {1, 4, 2}), lse(stats_of(dtype), {1, 4});
  AttentionArgs a = in.args(c);
  a.out = out.ref(), a.logsumexp = lse.ref();
  kernels_for(Device::cpu()).attention_forward(a);
  HostTensor go(dtype, {1, 4, 2}), gq(dtype, in.q.shape), gk(dtype, in.k.shape), gv(dtype, in.v.shape);
  go.fill_random(rng);
  a.grad_out = go.ref(), a.grad_q = gq.ref(), a.grad_k = gk.ref(), a.grad_v = gv.ref();
  kernels_for(Device::cpu()).attention_backward(a);
  for (int64_t e = 0; e < 2; ++e) EXPECT_EQ(out.get(2 * 2 + e), 0.0) << "out[2][" << e << "]";
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(gq.get(2 * 3 + e), 0.0) << "grad_q[2][" << e << "]";
  EXPECT_NE(out.get(0), 0.0);  // row 0 sees every key
  const Reference r = reference(c, in.q, in.k, in.v, in.mask, &out, &go, a.scale);
  demi::test::expect_close(gk.values(), r.gk, tolerances(dtype, c.L * c.Ev, r.gk), "grad_k");
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

// The fp64 reference of scaled dot-product attention for the kernel tests (CPU and CUDA): a table of
// cases whose L and S are not multiples of the CPU's tiles and whose E is odd, with bool and additive
// masks broadcast several ways and causal rows (L < S and L > S); the inputs drawn for a case; the
// forward and backward computed in double from the values the kernel read; and the tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/shape.h"
#include "support/tolerance.h"

namespace demi::test {

enum class AttnMask { None, Bool, Additive };

struct AttnCase {
  const char* name;
  Shape lead;
  int64_t L, S, E, Ev;
  AttnMask mask;
  Shape mask_shape;  // broadcastable to lead + [L, S]
  bool causal;
};

inline std::vector<AttnCase> attention_cases() {
  using M = AttnMask;
  return {
      {"tiny", {2}, 3, 5, 3, 4, M::None, {}, false},
      {"tile_tails", {2, 2}, 70, 130, 17, 9, M::None, {}, false},
      {"one_head_long_keys", {1}, 65, 300, 64, 64, M::None, {}, false},
      {"bool_mask_per_head", {2, 2}, 67, 131, 5, 7, M::Bool, {2, 2, 67, 131}, false},
      {"bool_key_padding", {3, 2}, 9, 140, 8, 8, M::Bool, {3, 1, 1, 140}, false},
      {"additive_mask_shared", {2, 3}, 66, 20, 6, 5, M::Additive, {66, 20}, false},
      {"additive_mask_per_query", {2}, 70, 129, 4, 3, M::Additive, {2, 70, 1}, false},
      {"causal_fewer_queries", {2, 2}, 40, 150, 7, 5, M::None, {}, true},
      {"causal_more_queries", {3}, 150, 70, 9, 6, M::None, {}, true},
      {"causal_square", {1, 2}, 129, 129, 16, 16, M::None, {}, true},
  };
}

inline std::string describe(const AttnCase& c, DType dtype) {
  std::ostringstream out;
  out << c.name << " " << dtype_name(dtype) << " B=" << shape_numel(c.lead) << " L=" << c.L << " S=" << c.S
      << " E=" << c.E << " Ev=" << c.Ev << " causal=" << c.causal;
  return out.str();
}

inline Shape with(Shape lead, int64_t a, int64_t b) {
  lead.push_back(a);
  lead.push_back(b);
  return lead;
}

inline DType attention_mask_dtype(const AttnCase& c, DType dtype) {
  return c.mask == AttnMask::Bool ? DType::U8 : dtype;
}
inline Shape attention_mask_shape(const AttnCase& c) { return c.mask == AttnMask::None ? Shape{1} : c.mask_shape; }

// A case's inputs as drawn (the caller stores them in its dtype and reads back what was stored):
// q, k, v uniform in [-1.5, 1.5) (logits of a few units), grad_out in [-1, 1), a bool mask with
// about a third of the keys out and row 1 of each mask plane out entirely, an additive mask of
// normal values with some -inf.
struct AttnValues {
  std::vector<double> q, k, v, mask, go;
};

inline AttnValues draw_attention(const AttnCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0), x(-1.5, 1.5), g(-1.0, 1.0);
  std::normal_distribution<double> n(0.0, 2.0);
  auto draw = [&](int64_t count, std::uniform_real_distribution<double>& d) {
    std::vector<double> out(static_cast<size_t>(count));
    for (double& e : out) e = d(rng);
    return out;
  };
  const int64_t B = shape_numel(c.lead);
  AttnValues vals{draw(B * c.L * c.E, x), draw(B * c.S * c.E, x), draw(B * c.S * c.Ev, x), {}, draw(B * c.L * c.Ev, g)};
  const Shape ms = attention_mask_shape(c);
  const int64_t cols = ms.back(), rows = ms.size() < 2 ? 1 : ms[ms.size() - 2];
  vals.mask.resize(static_cast<size_t>(shape_numel(ms)));
  for (size_t at = 0; at < vals.mask.size(); ++at) {
    const bool row_one = rows > 1 && (static_cast<int64_t>(at) / cols) % rows == 1;
    if (c.mask == AttnMask::Bool) vals.mask[at] = !row_one && u(rng) > 0.35 ? 1 : 0;
    if (c.mask == AttnMask::Additive) vals.mask[at] = u(rng) < 0.1 ? -INFINITY : n(rng);
  }
  return vals;
}

// The mask's value at (batch index bi, query i, key j) by numpy broadcasting, as an additive term.
inline double mask_term(const AttnCase& c, const std::vector<double>& mask, int64_t bi, int64_t i, int64_t j) {
  if (c.mask == AttnMask::None) return 0.0;
  const Shape full = with(c.lead, c.L, c.S);
  std::vector<int64_t> index(full.size());
  index[full.size() - 1] = j, index[full.size() - 2] = i;
  for (size_t d = c.lead.size(); d-- > 0;) index[d] = bi % c.lead[d], bi /= c.lead[d];
  int64_t at = 0;
  const size_t skip = full.size() - c.mask_shape.size();
  for (size_t d = 0; d < c.mask_shape.size(); ++d) {
    at = at * c.mask_shape[d] + (c.mask_shape[d] == 1 ? 0 : index[skip + d]);
  }
  const double m = mask[static_cast<size_t>(at)];
  return c.mask == AttnMask::Bool ? (m != 0 ? 0.0 : -INFINITY) : m;
}

// Probabilities of each (batch, query) row (all zeros where no key takes part), the output and the
// gradients for x.go, all exact on the stored inputs.
struct AttnReference {
  std::vector<double> p, out, gq, gk, gv, gmask;
};

inline AttnReference attention_reference(const AttnCase& c, const AttnValues& x, double scale) {
  const int64_t B = shape_numel(c.lead), L = c.L, S = c.S, E = c.E, Ev = c.Ev;
  AttnReference r;
  r.p.assign(B * L * S, 0.0), r.out.assign(B * L * Ev, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += x.q.at((b * L + i) * E + e) * x.k.at((b * S + j) * E + e);
        s[j] = (c.causal && j > i) ? -INFINITY : scale * dot + mask_term(c, x.mask, b, i, j);
        m = std::max(m, s[j]);
      }
      if (m == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += std::exp(s[j] - m);
      for (int64_t j = 0; j < S; ++j) {
        const double p = std::exp(s[j] - m) / sum;
        r.p[(b * L + i) * S + j] = p;
        for (int64_t e = 0; e < Ev; ++e) r.out[(b * L + i) * Ev + e] += p * x.v.at((b * S + j) * Ev + e);
      }
    }
  }
  r.gq.assign(B * L * E, 0.0), r.gk.assign(B * S * E, 0.0), r.gv.assign(B * S * Ev, 0.0);
  r.gmask.assign(B * L * S, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      double d = 0;
      for (int64_t e = 0; e < Ev; ++e) d += x.go.at((b * L + i) * Ev + e) * r.out[(b * L + i) * Ev + e];
      for (int64_t j = 0; j < S; ++j) {
        const double p = r.p[(b * L + i) * S + j];
        double dp = 0;
        for (int64_t e = 0; e < Ev; ++e) {
          dp += x.go.at((b * L + i) * Ev + e) * x.v.at((b * S + j) * Ev + e);
          r.gv[(b * S + j) * Ev + e] += p * x.go.at((b * L + i) * Ev + e);
        }
        const double ds = p * (dp - d);
        r.gmask[(b * L + i) * S + j] = ds;
        for (int64_t e = 0; e < E; ++e) {
          r.gq[(b * L + i) * E + e] += scale * ds * x.k.at((b * S + j) * E + e);
          r.gk[(b * S + j) * E + e] += scale * ds * x.q.at((b * L + i) * E + e);
        }
      }
    }
  }
  return r;
}

// Sums of `terms` products accumulated in fp32 (fp64): the accumulated row (support/tolerance.h),
// its absolute part taken relative to the result's scale (its largest |value|, at least 1), since
// the softmax and the score gradients (P (dP - D)) cancel terms of that size.
inline std::vector<Tolerance> attention_tolerances(DType dtype, int64_t terms, const std::vector<double>& want) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  Tolerance t = accumulated(dtype, terms);
  t.atol *= std::max(scale, 1.0);
  return std::vector<Tolerance>(want.size(), t);
}

}  // namespace demi::test

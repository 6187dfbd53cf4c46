// Scaled dot-product attention on the CPU, forward (the backward is attention_backward.cpp): a fused
// flash-style pass per (batch * head, block of kQueryRows queries), over blocks of kKeyCols keys,
// with the running maximum and sum of each query's row (online softmax), so that no more of the
// scores than one tile exists at a time; only the output and each row's logsumexp are kept. The
// products run on the ISA level's packed fp32 tile (q k^T: q packed, k transposed into the tile's
// strips; P v: P packed), bf16 q k^T on the level's bf16 tile where it has one (AMX; each bf16
// product is exact in fp32, so only the order of the fp32 sums differs); fp64 on Eigen. Half inputs
// are widened per tile, everything is summed in fp32 and the output rounded once.
#include "backends/cpu/attention_tiles.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/packed_gemm.h"

namespace demi::backend::cpu::attention {

namespace pg = packed_gemm;
namespace bf = packed_gemm_bf16;

namespace {
template <typename C>
using RowMatrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename C>
using ConstMap = Eigen::Map<const RowMatrix<C>, 0, Eigen::OuterStride<>>;
template <typename C>
using MutMap = Eigen::Map<RowMatrix<C>, 0, Eigen::OuterStride<>>;

template <typename C, typename P>
void eigen_product(MutMap<C> c, const P& product, bool accumulate) {
  if (accumulate) {
    c.noalias() += product;
  } else {
    c.noalias() = product;
  }
}
}  // namespace

int64_t pack_size(int64_t m, int64_t k) { return pg::packed_size(m, k); }

namespace {
pg::Accumulate accumulate_of(bool accumulate) { return accumulate ? pg::Accumulate::Yes : pg::Accumulate::No; }
template <typename C>
ConstMap<C> view(const C* p, int64_t rows, int64_t cols, int64_t ld) {
  return ConstMap<C>(p, rows, cols, Eigen::OuterStride<>(ld));
}
}  // namespace

template <typename C>
void mm_nt(const C* a, int64_t lda, int64_t m, const C* b, int64_t ldb, int64_t n, int64_t k, C* c, int64_t ldc,
           bool accumulate, C* pack) {
  if constexpr (std::is_same_v<C, float>) {
    pg::pack_a(a, lda, 1, m, k, pack);
    pg::gemm_bt(pack, m, k, b, ldb, n, c, ldc, accumulate_of(accumulate));
  } else {
    eigen_product<C>(MutMap<C>(c, m, n, Eigen::OuterStride<>(ldc)), view(a, m, k, lda) * view(b, n, k, ldb).transpose(),
                     accumulate);
  }
}
template <typename C>
void mm_nn(const C* a, int64_t lda, int64_t m, int64_t k, const C* b, int64_t ldb, int64_t n, C* c, int64_t ldc,
           bool accumulate, C* pack) {
  if constexpr (std::is_same_v<C, float>) {
    pg::pack_a(a, lda, 1, m, k, pack);
    pg::gemm(pack, m, k, b, ldb, n, c, ldc, nullptr, accumulate_of(accumulate));
  } else {
    eigen_product<C>(MutMap<C>(c, m, n, Eigen::OuterStride<>(ldc)), view(a, m, k, lda) * view(b, k, n, ldb), accumulate);
  }
}
template <typename C>
void mm_tn(const C* a, int64_t lda, int64_t m, int64_t k, const C* b, int64_t ldb, int64_t n, C* c, int64_t ldc,
           bool accumulate, C* pack) {
  if constexpr (std::is_same_v<C, float>) {
    pg::pack_a(a, 1, lda, m, k, pack);  // A[i][p] = a[p * lda + i]: each panel's rows are contiguous in a
    pg::gemm(pack, m, k, b, ldb, n, c, ldc, nullptr, accumulate_of(accumulate));
  } else {
    eigen_product<C>(MutMap<C>(c, m, n, Eigen::OuterStride<>(ldc)), view(a, k, m, lda).transpose() * view(b, k, n, ldb),
                     accumulate);
  }
}
template void mm_nt(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t, bool,
                    float*);
template void mm_nt(const double*, int64_t, int64_t, const double*, int64_t, int64_t, int64_t, double*, int64_t, bool,
                    double*);
template void mm_nn(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool,
                    float*);
template void mm_nn(const double*, int64_t, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t, bool,
                    double*);
template void mm_tn(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool,
                    float*);
template void mm_tn(const double*, int64_t, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t, bool,
                    double*);

int64_t bf16_a_size(int64_t m, int64_t k) { return bf::m_padded(m) * bf::k_padded(k); }
int64_t bf16_b_size(int64_t n, int64_t k) { return bf::b_size(k, n); }

void mm_nt_bf16(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b, int64_t ldb, int64_t n, int64_t k,
                float* c, int64_t ldc, uint16_t* a_pack, uint16_t* b_pack) {
  bf::pack_a(a, lda, 1, m, k, a_pack);
  bf::pack_bt(b, ldb, k, n, b_pack, 0);
  bf::pad_b(b_pack, k, n);
  bf::gemm(a_pack, bf::k_padded(k), m, k, b_pack, n, c, ldc, nullptr);
}

bool bf16_tile(DType dtype, int64_t E, int64_t Ev) {
  return dtype == DType::BF16 && E > 0 && Ev > 0 && bf::available();
}

namespace {

// One forward pass's per-thread scratch for blocks of up to kQueryRows x kKeyCols.
template <typename C>
struct ForwardTiles {
  C *q = nullptr, *k = nullptr, *v = nullptr;  // widened operands (half inputs)
  C *s = nullptr, *o = nullptr, *m = nullptr, *l = nullptr, *mask = nullptr, *pack = nullptr;
  uint16_t *a16 = nullptr, *b16 = nullptr;  // the bf16 tile's packed q and k
  size_t lay_out(char* base, DType dtype, int64_t E, int64_t Ev) {
    Carver c(base);
    if (is_half(dtype)) {
      q = c.take<C>(kQueryRows * E), k = c.take<C>(kKeyCols * E), v = c.take<C>(kKeyCols * Ev);
    }
    s = c.take<C>(kQueryRows * kKeyCols), o = c.take<C>(kQueryRows * Ev);
    m = c.take<C>(kQueryRows), l = c.take<C>(kQueryRows), mask = c.take<C>(kKeyCols);
    pack = c.take<C>(pack_size(kQueryRows, std::max(E, kKeyCols)));
    if (bf16_tile(dtype, E, Ev)) {
      a16 = c.take<uint16_t>(bf16_a_size(kQueryRows, E));
      b16 = c.take<uint16_t>(bf16_b_size(kKeyCols, E));
    }
    return c.used();
  }
};

// The online softmax over one tile of logits (rows queries, cols keys): P = exp(s - m_new) in
// place, the row's sum l and output o rescaled by exp(m_old - m_new) as the maximum moves.
template <typename C>
void online_softmax(C* s, int64_t ld, int64_t rows, int64_t cols, C* m, C* l, C* o, int64_t Ev) {
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  const C neg_inf = -std::numeric_limits<C>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::Map<Array> p(s + r * ld, cols);
    const C m_new = std::max(m[r], p.maxCoeff());
    if (m_new == neg_inf) {  // nothing takes part yet: no term, no rescaling
      p.setZero();
      continue;
    }
    exp_shifted(s + r * ld, &m_new, false, cols);
    const C correction = std::exp(m[r] - m_new);  // 0 for the first keys (m = -inf)
    l[r] = l[r] * correction + p.sum();
    if (correction != C(1)) Eigen::Map<Array>(o + r * Ev, Ev) *= correction;
    m[r] = m_new;
  }
}

// out = o / l rounded once, logsumexp = m + log(l); a row where nothing took part: 0 and 0 (torch's
// choice, which rebuilds P = exp(-inf - 0) = 0 in backward).
// With residual, what rounding took off each value of out, rounded to T itself.
template <typename T, typename C>
void finish_rows(const C* m, const C* l, C* o, int64_t rows, int64_t Ev, T* out, T* residual, C* lse) {
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::Map<Array> row(o + r * Ev, Ev);
    const bool empty = m[r] == -std::numeric_limits<C>::infinity();
    if (empty) {
      row.setZero();
    } else {
      row /= l[r];
    }
    lse[r] = empty ? C(0) : m[r] + std::log(l[r]);
  }
  if constexpr (std::is_same_v<T, C>) {
    std::copy(o, o + rows * Ev, out);
  } else {
    convert_n(o, out, rows * Ev);
    for (int64_t i = 0; residual && i < rows * Ev; ++i) residual[i] = T(o[i] - static_cast<C>(out[i]));
  }
}

// One (batch * head) b and its queries [q0, q0 + rows).
template <typename T>
void forward_block(const AttentionArgs& a, const AttnGeom& g, const Logits& logits, int64_t b, int64_t q0,
                   ForwardTiles<acc_t<T>>& t) {
  using C = acc_t<T>;
  const int64_t E = g.E, Ev = g.Ev, rows = std::min(kQueryRows, g.L - q0);
  const T* q_src = a.q.as<T>() + (b * g.L + q0) * E;
  const T* k_head = a.k.as<T>() + b * g.S * E;
  const T* v_head = a.v.as<T>() + b * g.S * Ev;
  const bool tile16 = t.a16 != nullptr;
  const C* q = tile16 ? nullptr : as_compute(q_src, rows * E, t.q);
  std::fill(t.m, t.m + rows, -std::numeric_limits<C>::infinity());
  std::fill(t.l, t.l + rows, C(0));
  std::fill(t.o, t.o + rows * Ev, C(0));
  // Causal: keys past the block's last query are cut for every row of it.
  const int64_t keys = a.causal ? std::min(g.S, q0 + rows) : g.S;
  for (int64_t k0 = 0; k0 < keys; k0 += kKeyCols) {
    const int64_t cols = std::min(kKeyCols, keys - k0);
    if constexpr (std::is_same_v<C, float>) {
      if (tile16) {
        mm_nt_bf16(reinterpret_cast<const uint16_t*>(q_src), E, rows,
                   reinterpret_cast<const uint16_t*>(k_head + k0 * E), E, cols, E, t.s, kKeyCols, t.a16, t.b16);
      }
    }
    if (!tile16) {
      mm_nt(q, E, rows, as_compute(k_head + k0 * E, cols * E, t.k), E, cols, E, t.s, kKeyCols, false, t.pack);
    }
    logits.apply(t.s, kKeyCols, rows, cols, q0, k0, false, b, t.mask);
    online_softmax(t.s, kKeyCols, rows, cols, t.m, t.l, t.o, Ev);
    mm_nn(t.s, kKeyCols, rows, cols, as_compute(v_head + k0 * Ev, cols * Ev, t.v), Ev, Ev, t.o, Ev, true, t.pack);
  }
  const int64_t at = (b * g.L + q0) * Ev;
  T* residual = a.out_residual.defined() ? a.out_residual.as<T>() + at : nullptr;
  finish_rows(t.m, t.l, t.o, rows, Ev, a.out.as<T>() + at, residual, a.logsumexp.as<C>() + b * g.L + q0);
}

template <typename T>
void forward_typed(const AttentionArgs& a, const AttnGeom& g) {
  using C = acc_t<T>;
  const Logits logits{g, a.mask, a.scale, a.causal};
  const int64_t blocks = (g.L + kQueryRows - 1) / kQueryRows, units = g.batch * blocks;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), units));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    ForwardTiles<C> t;
    t.lay_out(static_cast<char*>(thread_scratch_bytes(0, t.lay_out(nullptr, a.q.dtype, g.E, g.Ev))), a.q.dtype, g.E,
              g.Ev);
    // Dynamic: under a causal mask the first query blocks of a head have fewer keys.
#pragma omp for schedule(dynamic)
    for (int64_t u = 0; u < units; ++u) forward_block<T>(a, g, logits, u / blocks, u % blocks * kQueryRows, t);
  }
}

}  // namespace

size_t forward_scratch_bytes(DType dtype, int64_t E, int64_t Ev) {
  if (dtype == DType::F64) return ForwardTiles<double>().lay_out(nullptr, dtype, E, Ev);
  return ForwardTiles<float>().lay_out(nullptr, dtype, E, Ev);
}

size_t scratch_bytes(Pass pass, DType dtype, int64_t L, int64_t /*S*/, int64_t E, int64_t Ev) {
  return pass == Pass::Forward ? forward_scratch_bytes(dtype, E, Ev) : backward_scratch_bytes(dtype, L, E, Ev);
}

}  // namespace demi::backend::cpu::attention

namespace demi::backend::cpu {

void CpuKernels::attention_forward_impl(const AttentionArgs& args, const AttnGeom& g) {
  if (g.batch == 0 || g.L == 0) return;
  dispatch_floating(args.q.dtype, "attention_forward", [&](auto tag) {
    attention::forward_typed<decltype(tag)>(args, g);
  });
}

}  // namespace demi::backend::cpu

// Scaled dot-product attention on the CPU, backward: the scores are recomputed tile by tile from q, k
// and the forward's logsumexp, in tiles transposed so that every product reads row-major operands:
// for a block of kKeyRows keys (rows) against kQueryCols queries (columns),
//   S^T = k q^T (scaled, masked), P^T = exp(S^T - lse), dP^T = v dO^T, dS^T = P^T (dP^T - D),
//   grad_v += P^T dO, grad_k += dS^T q, grad_q += dS k, with D = rowsum(dO * out).
// A key block's grad_k and grad_v rows stay in fp32 accumulators while every query block passes, and
// grad_q accumulates over the key blocks in an fp32 L x E buffer of the head; each is scaled and
// rounded once. Work is spread over (batch * head, group of key blocks); a head is split into
// groups only when there are too few heads for the threads, and their grad_q partials are summed after.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/attention_tiles.h"
#include "backends/cpu/cpu_kernels.h"

namespace demi::backend::cpu::attention {
namespace {

// One backward pass's per-thread scratch.
template <typename C>
struct BackwardTiles {
  C *d = nullptr, *dq = nullptr;                            // D of the head's queries; its grad_q sum
  C *k = nullptr, *v = nullptr, *q = nullptr, *go = nullptr;  // widened operands (half inputs)
  C *dk = nullptr, *dv = nullptr;                           // the key block's grad_k, grad_v sums
  C *p = nullptr, *dp = nullptr, *mask = nullptr, *pack = nullptr;
  uint16_t *a16 = nullptr, *b16 = nullptr;  // the bf16 tile's packed operands
  size_t lay_out(char* base, DType dtype, int64_t L, int64_t E, int64_t Ev, bool own_dq) {
    Carver c(base);
    d = c.take<C>(L);
    if (own_dq) dq = c.take<C>(L * E);
    if (is_half(dtype)) {
      k = c.take<C>(kKeyRows * E), v = c.take<C>(kKeyRows * Ev);
      q = c.take<C>(kQueryCols * E), go = c.take<C>(kQueryCols * Ev);
    }
    dk = c.take<C>(kKeyRows * E), dv = c.take<C>(kKeyRows * Ev);
    p = c.take<C>(kKeyRows * kQueryCols), dp = c.take<C>(kKeyRows * kQueryCols), mask = c.take<C>(kQueryCols);
    // A of the products: k or v (keys x E), P^T (keys x queries), dS (queries x keys).
    pack = c.take<C>(std::max({pack_size(kKeyRows, std::max(E, Ev)), pack_size(kKeyRows, kQueryCols),
                               pack_size(kQueryCols, kKeyRows)}));
    if (bf16_tile(dtype, E, Ev)) {
      a16 = c.take<uint16_t>(bf16_a_size(kKeyRows, std::max(E, Ev)));
      b16 = c.take<uint16_t>(bf16_b_size(kQueryCols, std::max(E, Ev)));
    }
    return c.used();
  }
};

// out (rows x cols, row stride kQueryCols) = x y^T over `depth` for x (rows x depth) and y (cols x
// depth): on the bf16 tile from the inputs' bits (x_in, y_in), else from their widened copies.
template <typename T, typename C>
void products(bool tile16, const T* x_in, const C* x, int64_t depth, int64_t rows, const T* y_in, const C* y,
              int64_t cols, C* out, BackwardTiles<C>& t) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (tile16) {
      return mm_nt_bf16(reinterpret_cast<const uint16_t*>(x_in), depth, rows, reinterpret_cast<const uint16_t*>(y_in),
                        depth, cols, depth, out, kQueryCols, t.a16, t.b16);
    }
  }
  mm_nt(x, depth, rows, y, depth, cols, depth, out, kQueryCols, false, t.pack);
}

// n values of src times scale, rounded once into dst (src is scratch: scaled in place).
template <typename T, typename C>
void store_scaled(C* src, int64_t n, C scale, T* dst) {
  Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>(src, n) *= scale;
  if constexpr (std::is_same_v<T, C>) {
    std::copy(src, src + n, dst);
  } else {
    convert_n(src, dst, n);
  }
}

// What one (batch * head) needs throughout: its operands, D and logsumexp, and where grad_q sums go.
template <typename T>
struct Head {
  using C = acc_t<T>;
  const T *q, *k, *v, *go;
  const C *lse, *d;
  C* dq;  // L x E, or null when grad_q is not wanted
  int64_t b;
};

// The queries [q0, q0 + rows) against the key block [k0, k0 + cols) whose widened k and v are
// kc, vc: adds to the block's grad_k, grad_v sums and to the head's grad_q sum.
template <typename T>
void query_tile(const AttentionArgs& a, const AttnGeom& g, const Logits& logits, const Head<T>& h, int64_t k0,
                int64_t cols, const acc_t<T>* kc, const acc_t<T>* vc, int64_t q0, BackwardTiles<acc_t<T>>& t) {
  using C = acc_t<T>;
  const int64_t E = g.E, Ev = g.Ev, rows = std::min(kQueryCols, g.L - q0), ld = kQueryCols;
  const bool tile16 = t.a16 != nullptr;
  const C* q = as_compute(h.q + q0 * E, rows * E, t.q);
  const C* go = as_compute(h.go + q0 * Ev, rows * Ev, t.go);
  products(tile16, h.k + k0 * E, kc, E, cols, h.q + q0 * E, q, rows, t.p, t);
  logits.apply(t.p, ld, cols, rows, k0, q0, true, h.b, t.mask);
  for (int64_t r = 0; r < cols; ++r) exp_shifted(t.p + r * ld, h.lse + q0, true, rows);
  if (a.grad_v.defined()) mm_nn(t.p, ld, cols, rows, go, Ev, Ev, t.dv, Ev, true, t.pack);
  if (!a.grad_k.defined() && !h.dq && !a.grad_mask.defined()) return;
  products(tile16, h.v + k0 * Ev, vc, Ev, cols, h.go + q0 * Ev, go, rows, t.dp, t);
  using Array = Eigen::Array<C, Eigen::Dynamic, 1>;
  const Eigen::Map<const Array> d(h.d + q0, rows);
  for (int64_t r = 0; r < cols; ++r) {  // dS^T = P^T (dP^T - D), in dp
    Eigen::Map<Array> ds(t.dp + r * ld, rows);
    ds = Eigen::Map<const Array>(t.p + r * ld, rows) * (ds - d);
  }
  if (a.grad_mask.defined()) {
    C* gm = a.grad_mask.as<C>() + (h.b * g.L + q0) * g.S + k0;
    for (int64_t r = 0; r < cols; ++r) {
      for (int64_t c = 0; c < rows; ++c) gm[c * g.S + r] = t.dp[r * ld + c];
    }
  }
  if (a.grad_k.defined()) mm_nn(t.dp, ld, cols, rows, q, E, E, t.dk, E, true, t.pack);
  if (h.dq) mm_tn(t.dp, ld, rows, cols, kc, E, E, h.dq + q0 * E, E, true, t.pack);
}

// The key block [k0, k0 + cols) against every query that sees it; writes its grad_k and grad_v rows.
template <typename T>
void key_block(const AttentionArgs& a, const AttnGeom& g, const Logits& logits, const Head<T>& h, int64_t k0,
               BackwardTiles<acc_t<T>>& t) {
  using C = acc_t<T>;
  const int64_t E = g.E, Ev = g.Ev, cols = std::min(kKeyRows, g.S - k0);
  const C* kc = as_compute(h.k + k0 * E, cols * E, t.k);
  const C* vc = as_compute(h.v + k0 * Ev, cols * Ev, t.v);
  std::fill(t.dk, t.dk + cols * E, C(0));
  std::fill(t.dv, t.dv + cols * Ev, C(0));
  // Causal: the queries before k0 see none of these keys.
  for (int64_t q0 = a.causal ? std::min(k0, g.L) : 0; q0 < g.L; q0 += kQueryCols) {
    query_tile(a, g, logits, h, k0, cols, kc, vc, q0, t);
  }
  const int64_t row = h.b * g.S + k0;
  if (a.grad_k.defined()) store_scaled(t.dk, cols * E, static_cast<C>(a.scale), a.grad_k.as<T>() + row * E);
  if (a.grad_v.defined()) store_scaled(t.dv, cols * Ev, C(1), a.grad_v.as<T>() + row * Ev);
}

// D_i = sum_e dO[i][e] (out[i][e] + residual[i][e]) for the head's L queries, in C (residual: out's
// rounding error, or null).
template <typename T>
void row_dots(const T* go, const T* out, const T* residual, int64_t L, int64_t Ev, acc_t<T>* d) {
  using C = acc_t<T>;
  for (int64_t i = 0; i < L; ++i) {
    C sum = 0;
    for (int64_t e = 0; e < Ev; ++e) {
      const int64_t at = i * Ev + e;
      sum += static_cast<C>(go[at]) * (static_cast<C>(out[at]) + (residual ? static_cast<C>(residual[at]) : C(0)));
    }
    d[i] = sum;
  }
}

// How the key blocks are grouped: `groups` per head (1 unless the heads are fewer than the threads).
struct Split {
  int64_t key_blocks, groups;
  int64_t first(int64_t group) const { return group * key_blocks / groups; }
};

template <typename T>
void backward_unit(const AttentionArgs& a, const AttnGeom& g, const Logits& logits, const Split& split, int64_t u,
                   acc_t<T>* partials, BackwardTiles<acc_t<T>>& t) {
  using C = acc_t<T>;
  const int64_t b = u / split.groups, group = u % split.groups, L = g.L, E = g.E;
  const T* go = a.grad_out.as<T>() + b * L * g.Ev;
  const T* residual = a.out_residual.defined() ? a.out_residual.as<T>() + b * L * g.Ev : nullptr;
  row_dots(go, a.out.as<T>() + b * L * g.Ev, residual, L, g.Ev, t.d);
  C* dq = !a.grad_q.defined() ? nullptr : split.groups == 1 ? t.dq : partials + u * L * E;
  if (dq) std::fill(dq, dq + L * E, C(0));
  const Head<T> h{a.q.as<T>() + b * L * E, a.k.as<T>() + b * g.S * E, a.v.as<T>() + b * g.S * g.Ev, go,
                  a.logsumexp.as<C>() + b * L, t.d, dq, b};
  for (int64_t j = split.first(group); j < split.first(group + 1); ++j) key_block(a, g, logits, h, j * kKeyRows, t);
  if (dq && split.groups == 1) store_scaled(dq, L * E, static_cast<C>(a.scale), a.grad_q.as<T>() + b * L * E);
}

// grad_q = scale * the sum of each head's group partials, rounded once.
template <typename T>
void sum_partials(const AttentionArgs& a, const AttnGeom& g, int64_t groups, acc_t<T>* partials) {
  using C = acc_t<T>;
  const int64_t LE = g.L * g.E;
  parallel_for(g.batch, groups * LE, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      C* sum = partials + b * groups * LE;
      for (int64_t grp = 1; grp < groups; ++grp) {
        for (int64_t i = 0; i < LE; ++i) sum[i] += sum[grp * LE + i];
      }
      store_scaled(sum, LE, static_cast<C>(a.scale), a.grad_q.as<T>() + b * LE);
    }
  });
}

template <typename T>
void backward_typed(const AttentionArgs& a, const AttnGeom& g) {
  using C = acc_t<T>;
  const Logits logits{g, a.mask, a.scale, a.causal};
  const int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t key_blocks = std::max<int64_t>(1, (g.S + kKeyRows - 1) / kKeyRows);
  const Split split{key_blocks, std::min(key_blocks, (max_threads + g.batch - 1) / g.batch)};
  const int64_t units = g.batch * split.groups;
  const bool shared_dq = split.groups > 1 && a.grad_q.defined();
  C* partials = shared_dq ? thread_scratch<C>(1, units * g.L * g.E) : nullptr;  // the calling thread's slot 1
  const int threads = static_cast<int>(std::min<int64_t>(max_threads, units));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    BackwardTiles<C> t;
    const bool own_dq = !shared_dq && a.grad_q.defined();
    t.lay_out(static_cast<char*>(thread_scratch_bytes(0, t.lay_out(nullptr, a.q.dtype, g.L, g.E, g.Ev, own_dq))),
              a.q.dtype, g.L, g.E, g.Ev, own_dq);
#pragma omp for schedule(dynamic)
    for (int64_t u = 0; u < units; ++u) backward_unit<T>(a, g, logits, split, u, partials, t);
  }
  if (shared_dq) sum_partials<T>(a, g, split.groups, partials);
}

}  // namespace

size_t backward_scratch_bytes(DType dtype, int64_t L, int64_t E, int64_t Ev) {
  if (dtype == DType::F64) return BackwardTiles<double>().lay_out(nullptr, dtype, L, E, Ev, true);
  return BackwardTiles<float>().lay_out(nullptr, dtype, L, E, Ev, true);
}

}  // namespace demi::backend::cpu::attention

namespace demi::backend::cpu {

void CpuKernels::attention_backward_impl(const AttentionArgs& args, const AttnGeom& g) {
  if (g.batch == 0) return;
  auto zero = [&](const TensorRef& t) {
    if (t.defined()) fill_impl(t, 0.0);
  };
  if (g.L == 0 || g.S == 0) {  // no score: every gradient is 0
    for (const TensorRef* t : {&args.grad_q, &args.grad_k, &args.grad_v, &args.grad_mask}) zero(*t);
    return;
  }
  dispatch_floating(args.q.dtype, "attention_backward", [&](auto tag) {
    attention::backward_typed<decltype(tag)>(args, g);
  });
}

}  // namespace demi::backend::cpu

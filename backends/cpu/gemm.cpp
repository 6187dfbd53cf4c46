// CpuKernels::gemm: batched row-major C = alpha * op(A) op(B) + beta * C (+ bias). fp32 products run
// on the ISA level's fp32 tile where it is wider than the baseline (AVX-512: isa::F32Gemm::matmuls),
// else on Eigen's GEMM with the operands mapped in place (transposes are Eigen views, no copies), as
// fp64 ones always do. Half operands are widened to fp32 once, multiplied by one sgemm and rounded
// once into C, as tensor cores do; bf16 operands go to the level's bf16 tile instead where it has
// one (AMX, AVX512_BF16).
#include <algorithm>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstRowMap = Eigen::Map<const RowMatrix<T>>;

// Scratch slots: A to kSlotBias are the calling thread's, never used inside the batch-parallel
// region; each thread packs its products into its own kSlotPackedA and kSlotPackedB.
enum Slot { kSlotA = 0, kSlotB = 1, kSlotC = 2, kSlotBias = 3, kSlotPackedA = 4, kSlotPackedB = 5, kSlotPartial = 6 };

// Products of fewer flops run on one thread (about 4 us: waking the other threads costs 1-2).
constexpr double kParallelFlops = 1 << 20;
// The most of B sgemm_packed packs at a time.
constexpr int64_t kPackedBBytes = int64_t{16} << 20;

// An fp32 product on the ISA level's tile (packed_gemm.h), for which Eigen's GEMM, built for the
// library's baseline (AVX2), reaches half an AVX-512 core's FMA rate: op(A) packed into panels with
// alpha folded in, op(B) packed into column strips for large products, then C in blocks. One
// parallel region: the threads pack shares of A and B, then form C by rows (whole panels) or by
// columns (whole strips), whichever gives the busiest thread less (512 columns are 11 strips of
// 48, 6 of them one thread's).
void sgemm_packed(const float* a, const float* b, float* c, const float* bias, const GemmArgs& g) {
  namespace pg = packed_gemm;
  const isa::F32Gemm& tile = isa::active().gemm;
  const int64_t m = g.m, n = g.n, k = g.k, mr = tile.mr, nr = tile.nr;
  const bool ta = g.trans_a == Transpose::Yes, tb = g.trans_b == Transpose::Yes;
  float* a_packed = thread_scratch<float>(kSlotPackedA, pg::packed_size(m, k));
  const int64_t panels = (m + mr - 1) / mr, strips = (n + nr - 1) / nr;
  const bool parallel = !omp_in_parallel() && 2.0 * static_cast<double>(m * n) * static_cast<double>(k) >= kParallelFlops;
  const int threads = parallel ? omp_get_max_threads() : 1;
  auto busiest = [&](int64_t units, int64_t unit, int64_t size) {
    return static_cast<double>(std::min(size, (units + threads - 1) / threads * unit)) / static_cast<double>(size);
  };
  const bool split_columns = busiest(strips, nr, n) <= busiest(panels, mr, m);
  // B is packed when a thread's rows of A outgrow L2 and are taken in blocks, each meeting all of
  // B; else each block of B is copied (or transposed) into L1 once, as the convolutions' GEMMs do,
  // without a pass over all of B first (512^3: 383 GFLOP/s against 352 packed; 1024^3: 332 against
  // 360). A B of more than kPackedBBytes is packed a chunk of whole strips at a time, so that the
  // scratch the threads keep stays bounded (a language model's output layer is 150 MB).
  const int64_t thread_rows = split_columns ? m : std::min(m, (panels + threads - 1) / threads * mr);
  const bool pack_b = thread_rows * k * static_cast<int64_t>(sizeof(float)) > pg::kPanelBlockBytes;
  const int64_t chunk = pack_b ? std::clamp<int64_t>(kPackedBBytes / (k * nr * int64_t{sizeof(float)}), 1, strips) : strips;
  float* b_packed = pack_b ? thread_scratch<float>(kSlotPackedB, chunk * nr * k) : nullptr;
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  const auto accumulate = g.beta == 0.0 ? pg::Accumulate::No : pg::Accumulate::Yes;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    auto share = [&](int64_t begin, int64_t end, int64_t& from, int64_t& to) {
      const int64_t size = (end - begin + nt - 1) / nt;
      from = std::min(end, begin + t * size), to = std::min(end, from + size);
    };
    int64_t p0, p1;
    share(0, panels, p0, p1);
    const int64_t r0 = p0 * mr, r1 = std::min(m, p1 * mr);
    if (r0 < r1) {
      pg::pack_a(ta ? a + r0 : a + r0 * k, ta ? 1 : k, ta ? m : 1, r1 - r0, k, a_packed + r0 * k);
      if (alpha != 1.0f) {
        for (int64_t i = r0 * k; i < p1 * mr * k; ++i) a_packed[i] *= alpha;
      }
    }
    for (int64_t j0 = 0; j0 < strips; j0 += chunk) {  // once unless B is packed in chunks
      const int64_t j1 = std::min(strips, j0 + chunk), first = j0 * nr;  // C's first column in the chunk
      int64_t s0, s1;
      share(j0, j1, s0, s1);
      const int64_t c0 = s0 * nr, c1 = std::min(n, s1 * nr);
      if (pack_b && c0 < c1) {
        pg::pack_b(tb ? b + c0 * k : b + c0, tb ? 1 : n, tb ? k : 1, k, c1 - c0, b_packed + (c0 - first) * k);
      }
#pragma omp barrier
      const int64_t rb = split_columns ? 0 : r0, re = split_columns ? m : r1;
      const int64_t cb = split_columns ? c0 : first, ce = split_columns ? c1 : std::min(n, j1 * nr);
      if (rb < re && cb < ce) {
        if (beta != 0.0f && beta != 1.0f) {
          for (int64_t r = rb; r < re; ++r) {
            for (int64_t j = cb; j < ce; ++j) c[r * n + j] *= beta;
          }
        }
        if (pack_b) {  // the chunk's columns counted from its first
          pg::gemm_packed_b(a_packed, b_packed, k, rb, re, cb - first, ce - first, c + first, n, accumulate);
        } else if (tb) {
          pg::gemm_bt(a_packed + rb * k, re - rb, k, b + cb * k, k, ce - cb, c + rb * n + cb, n, accumulate);
        } else {
          pg::gemm(a_packed + rb * k, re - rb, k, b + cb, n, ce - cb, c + rb * n + cb, n, nullptr, accumulate);
        }
        if (bias) {
          for (int64_t r = rb; r < re; ++r) {
            for (int64_t j = cb; j < ce; ++j) c[r * n + j] += bias[j];
          }
        }
      }
      if (j1 < strips) {
#pragma omp barrier
      }
    }
  }
}

// Whether an fp32 product runs on the tile (sgemm_packed): on levels whose tile is wider than the
// baseline, for products it pays for, against Eigen's GEMM on the AMX Xeon: two vectors of columns
// or more (1024 x 16 x 1024: 122 GFLOP/s on the tile, 136 on Eigen; 1024 x 32 x 1024: 200 against
// 165) and 32^3 multiply-adds or more (batches of 24^3 products: 46 against 60; of 32^3: 86 against
// 79).
bool on_tile(const GemmArgs& g) {
  return isa::active().gemm.matmuls && g.n >= 32 && g.m * g.n * g.k >= 32 * 32 * 32;
}

// One product in the compute type T (float or double): c = alpha * op(a) op(b) + beta * c + bias.
template <typename T>
void gemm_one(const T* a, const T* b, T* c, const T* bias, const GemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  if constexpr (std::is_same_v<T, float>) {
    if (on_tile(g)) return sgemm_packed(a, b, c, bias, g);
  }
  Eigen::Map<RowMatrix<T>> C(c, m, n);
  const T alpha = static_cast<T>(g.alpha);
  const T beta = static_cast<T>(g.beta);
  auto run = [&](const auto& A, const auto& B) {
    if (g.beta == 0.0) {
      C.noalias() = alpha * A * B;  // C may hold garbage (even NaN): never read it
    } else {
      if (g.beta != 1.0) C *= beta;
      C.noalias() += alpha * A * B;
    }
  };
  const bool ta = g.trans_a == Transpose::Yes, tb = g.trans_b == Transpose::Yes;
  if (!ta && !tb) run(ConstRowMap<T>(a, m, k), ConstRowMap<T>(b, k, n));
  else if (ta && !tb) run(ConstRowMap<T>(a, k, m).transpose(), ConstRowMap<T>(b, k, n));
  else if (!ta && tb) run(ConstRowMap<T>(a, m, k), ConstRowMap<T>(b, n, k).transpose());
  else run(ConstRowMap<T>(a, k, m).transpose(), ConstRowMap<T>(b, n, k).transpose());
  if (bias) C.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, n);
}

// Converts n elements into a scratch buffer of type To (or returns src when it already is To).
template <typename To>
const To* as_compute(const TensorRef& t, int64_t n, int slot) {
  if (t.dtype == DTypeOf<To>::value) return t.as<To>();
  To* out = thread_scratch<To>(slot, n);
  dispatch_floating(t.dtype, "gemm", [&](auto tag) {
    using S = decltype(tag);
    const S* src = t.as<S>();
    parallel_for(n, 1, [&](int64_t begin, int64_t end) { convert_n(src + begin, out + begin, end - begin); });
  });
  return out;
}

template <typename T>
void gemm_typed(const GemmArgs& g) {
  const int64_t mk = g.m * g.k, kn = g.k * g.n, mn = g.m * g.n;
  const int64_t span_a = gemm_span(g.batch, g.stride_a, mk), span_b = gemm_span(g.batch, g.stride_b, kn);
  const T* a = as_compute<T>(g.a, span_a, kSlotA);
  const T* b = as_compute<T>(g.b, span_b, kSlotB);
  const T* bias = g.bias.defined() ? as_compute<T>(g.bias, g.n, kSlotBias) : nullptr;

  // When C is stored narrower (or just differently), the whole result is formed in T, beta * C
  // and bias included, and rounded into C once at the end.
  const bool c_direct = g.c.dtype == DTypeOf<T>::value;
  const int64_t stride_c = g.batch == 1 ? mn : g.stride_c;
  T* c = nullptr;
  int64_t cs = stride_c;
  if (c_direct) {
    c = g.c.as<T>();
  } else {
    cs = mn;
    c = thread_scratch<T>(kSlotC, g.batch * mn);
    if (g.beta != 0.0) {
      dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
        using S = decltype(tag);
        const S* src = g.c.as<S>();
        for (int64_t i = 0; i < g.batch; ++i) convert_n(src + i * stride_c, c + i * cs, mn);
      });
    }
  }

  const int64_t sa = g.stride_a, sb = g.stride_b;
  auto one = [&](int64_t i) { gemm_one<T>(a + i * sa, b + i * sb, c + i * cs, bias, g); };
  // Many small products: one per thread, each single-threaded (Eigen sees omp_get_num_threads() > 1
  // inside the region). Few large products: one after another, each split by Eigen's own OpenMP.
  const int threads = omp_get_max_threads();
  const bool per_batch = g.batch >= 4 * threads || (g.batch >= threads && mn * g.k < 256 * 256 * 256);
  if (g.batch > 1 && per_batch && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  }

  if (!c_direct) {
    dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
      using S = decltype(tag);
      S* dst = g.c.as<S>();
      for (int64_t i = 0; i < g.batch; ++i) {
        const T* src = c + i * cs;
        parallel_for(mn, 1, [&](int64_t begin, int64_t end) {
          if constexpr (std::is_same_v<T, double> && !std::is_same_v<S, float>) {
            for (int64_t j = begin; j < end; ++j) dst[i * stride_c + j] = round_to<S>(src[j]);  // once, not via fp32
          } else {
            convert_n(src + begin, dst + i * stride_c + begin, end - begin);
          }
        });
      }
    });
  }
}

// Rows of C that one thread forms at a time when a bf16 product is split by rows: their fp32 block
// (256 x 768 floats: 768 KiB) stays in L2 until it is rounded into C.
constexpr int64_t kBf16RowBlock = 256;

// Alpha, beta * C and bias applied in fp32 to rows [r0, r1) of product i's A B (`ab`: row r0 first,
// row stride n), and the rows rounded into C once.
void finish_bf16_rows(const GemmArgs& g, int64_t i, const float* bias, float* ab, int64_t r0, int64_t r1) {
  const int64_t n = g.n, stride_c = g.batch == 1 ? g.m * n : g.stride_c;
  dispatch_floating(g.c.dtype, "gemm", [&](auto tag) {
    using S = decltype(tag);
    S* c = g.c.as<S>() + i * stride_c;
    for (int64_t r = r0; r < r1; ++r) {
      float* row = ab + (r - r0) * n;
      for (int64_t j = 0; j < n; ++j) {
        float v = static_cast<float>(g.alpha) * row[j];
        if (g.beta != 0.0) v += static_cast<float>(g.beta) * static_cast<float>(c[r * n + j]);
        row[j] = bias ? v + bias[j] : v;
      }
      convert_n(row, c + r * n, n);
    }
  });
}

// Product i's B into pairs of k rows (packed_gemm.h), padded.
void pack_bf16_b(const GemmArgs& g, int64_t i, uint16_t* b) {
  namespace bf = packed_gemm_bf16;
  const uint16_t* src = g.b.as<uint16_t>() + i * g.stride_b;
  if (g.trans_b == Transpose::Yes) {
    bf::pack_bt(src, g.k, g.k, g.n, b, 0);
  } else {
    bf::pack_b(src, g.n, g.k, g.n, b, 0);
  }
  bf::pad_b(b, g.k, g.n);
}

// A tall product (a Linear over every token of a batch) in blocks of kBf16RowBlock rows spread
// over the threads, each block's rows of A packed and its A B rounded into C from the thread's
// scratch: no m x n fp32 matrix goes to memory and back (CCT-7's in-projection, 32768 x 768 x 256:
// 100 MB each way).
void gemm_bf16_row_blocks(const GemmArgs& g, int64_t i, const uint16_t* b, const float* bias) {
  namespace bf = packed_gemm_bf16;
  const int64_t m = g.m, n = g.n, k = g.k, kp = bf::k_padded(k), blocks = (m + kBf16RowBlock - 1) / kBf16RowBlock;
  const bool ta = g.trans_a == Transpose::Yes;
  const uint16_t* a_src = g.a.as<uint16_t>() + i * g.stride_a;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t r0 = block * kBf16RowBlock, rows = std::min(kBf16RowBlock, m - r0);
    uint16_t* a = thread_scratch<uint16_t>(kSlotPackedA, bf::m_padded(rows) * kp);
    float* ab = thread_scratch<float>(kSlotPackedB, rows * n);
    bf::pack_a(ta ? a_src + r0 : a_src + r0 * k, ta ? 1 : k, ta ? m : 1, rows, k, a);
    bf::gemm(a, kp, rows, k, b, n, ab, n, nullptr);
    finish_bf16_rows(g, i, bias, ab, r0, r0 + rows);
  }
}

// Product i's A B in fp32 into ab (m x n, row stride n): B packed into pairs of k rows, A into
// panels, the column strips spread over the threads unless each thread has products of its own.
void bf16_ab(const GemmArgs& g, int64_t i, float* ab, bool per_batch) {
  namespace bf = packed_gemm_bf16;
  const int64_t m = g.m, n = g.n, k = g.k, kp = bf::k_padded(k);
  const bool ta = g.trans_a == Transpose::Yes;
  uint16_t* b = thread_scratch<uint16_t>(kSlotB, bf::b_size(k, n));
  pack_bf16_b(g, i, b);
  uint16_t* a = thread_scratch<uint16_t>(kSlotA, bf::m_padded(m) * kp);
  bf::pack_a(g.a.as<uint16_t>() + i * g.stride_a, ta ? 1 : k, ta ? m : 1, m, k, a);
  const int64_t strip = isa::active().bf16.nr, strips = (n + strip - 1) / strip;
  auto strip_range = [&](int64_t s0, int64_t s1) {
    const int64_t c0 = s0 * strip, c1 = std::min(n, s1 * strip);
    bf::gemm(a, kp, m, k, bf::b_columns(b, k, c0), c1 - c0, ab + c0, n, nullptr);
  };
  if (per_batch) {
    strip_range(0, strips);
  } else {
    parallel_for(strips, m * k * strip, strip_range);
  }
}

// Rows of k a weight gradient's blocks take (k_blocked): a block's A^T (m x 512 bf16: 256 KiB at
// m = 256) and B stay in L2 while they are packed and multiplied.
constexpr int64_t kBf16KBlock = 512;
// Partial sums a k-blocked product keeps (consecutive blocks each): the threads' shares, fixed so
// that the result does not depend on the thread count.
constexpr int64_t kBf16KGroups = 8;

// A weight gradient C = A^T B (A, B stored [k, m] and [k, n]) over a long k (the tokens of a batch)
// into a small C: k_blocked takes it a block of k at a time (bf16_ab_k_blocks).
bool k_blocked(const GemmArgs& g) {
  return g.trans_a == Transpose::Yes && g.trans_b == Transpose::No && g.k >= 4 * kBf16KBlock &&
         g.m * g.n <= (int64_t{1} << 20);
}

// Product i's A^T B in fp32 into ab (m x n) by blocks of kBf16KBlock rows of k: each block's A^T
// and B packed while in cache and multiplied into its group's partial sum, the groups spread over
// the threads and added in order. Packing all of A^T first and walking it strip by strip read a
// k-long panel from memory for every strip (CCT-7's 256 x 256 x 32768: 27 -> 4.6 ms on AMX).
void bf16_ab_k_blocks(const GemmArgs& g, int64_t i, float* ab, bool per_batch) {
  namespace bf = packed_gemm_bf16;
  const int64_t m = g.m, n = g.n, k = g.k, mn = m * n;
  const int64_t blocks = (k + kBf16KBlock - 1) / kBf16KBlock, groups = std::min(kBf16KGroups, blocks);
  const uint16_t* a_src = g.a.as<uint16_t>() + i * g.stride_a;
  const uint16_t* b_src = g.b.as<uint16_t>() + i * g.stride_b;
  float* partial = thread_scratch<float>(kSlotPartial, (groups - 1) * mn);  // groups 1..: group 0 sums into ab
  auto group = [&](int64_t gi) {
    float* c = gi == 0 ? ab : partial + (gi - 1) * mn;
    uint16_t* a = thread_scratch<uint16_t>(kSlotPackedA, bf::m_padded(m) * bf::k_padded(kBf16KBlock));
    uint16_t* b = thread_scratch<uint16_t>(kSlotPackedB, bf::b_size(kBf16KBlock, n));
    const int64_t first = blocks * gi / groups, last = blocks * (gi + 1) / groups;
    for (int64_t block = first; block < last; ++block) {
      const int64_t k0 = block * kBf16KBlock, kc = std::min(kBf16KBlock, k - k0);
      bf::pack_a(a_src + k0 * m, 1, m, m, kc, a);  // A^T's rows are A's columns
      bf::pack_b(b_src + k0 * n, n, kc, n, b, 0);
      bf::pad_b(b, kc, n);
      bf::gemm(a, bf::k_padded(kc), m, kc, b, n, c, n, nullptr,
               block == first ? packed_gemm::Accumulate::No : packed_gemm::Accumulate::Yes);
    }
  };
  if (per_batch) {
    for (int64_t gi = 0; gi < groups; ++gi) group(gi);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t gi = 0; gi < groups; ++gi) group(gi);
  }
  auto add_partials = [&](int64_t begin, int64_t end) {
    for (int64_t gi = 1; gi < groups; ++gi) {
      const float* p = partial + (gi - 1) * mn;
      for (int64_t j = begin; j < end; ++j) ab[j] += p[j];
    }
  };
  if (per_batch) {
    add_partials(0, mn);
  } else {
    parallel_for(mn, groups, add_partials);
  }
}

// A weight gradient C = A^T B (A, B stored [k, m] and [k, n], k the tokens of a batch) whose B is
// the narrower is formed as C^T = B^T A and transposed: the operand gathered column by column into
// panels is then the narrower one, and the wider one is packed into pairs of rows as it lies
// (CCT-7's in-projection gradient, 768 x 256 x 32768: 42.6 -> 25.7 ms on AMX).
bool transposed_is_cheaper(const GemmArgs& g) {
  return g.trans_a == Transpose::Yes && g.trans_b == Transpose::No && g.n < g.m;
}

GemmArgs transposed_product(const GemmArgs& g) {
  GemmArgs t = g;
  t.a = g.b;
  t.b = g.a;
  t.stride_a = g.stride_b;
  t.stride_b = g.stride_a;
  t.m = g.n;
  t.n = g.m;
  t.bias = {};
  t.alpha = 1.0;
  t.beta = 0.0;
  return t;  // trans_a stays Yes (B^T of a B stored [k, n]), trans_b No (A stored [k, m])
}

// bf16 A and B on the ISA level's bf16 tile (packed_gemm.h): A packed into panels, B into pairs
// of k rows, A B formed in fp32 (each bf16 product exact), alpha, beta * C and bias applied in fp32
// and the result rounded into C once. Products are spread over threads when there are enough of
// them; else a tall one's blocks of rows are, or each one's column strips.
void gemm_bf16(const GemmArgs& g) {
  namespace bf = packed_gemm_bf16;
  const int64_t m = g.m, n = g.n, k = g.k;
  const float* bias = g.bias.defined() ? as_compute<float>(g.bias, n, kSlotBias) : nullptr;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool per_batch = g.batch >= threads;
  const bool row_blocks = !per_batch && threads > 1 && m >= 4 * threads * kBf16RowBlock;
  auto one = [&](int64_t i) {
    if (row_blocks) {
      uint16_t* b = thread_scratch<uint16_t>(kSlotB, bf::b_size(k, n));
      pack_bf16_b(g, i, b);
      return gemm_bf16_row_blocks(g, i, b, bias);
    }
    float* ab = thread_scratch<float>(kSlotC, m * n);
    if (k_blocked(g)) {
      bf16_ab_k_blocks(g, i, ab, per_batch);
    } else if (transposed_is_cheaper(g)) {
      float* abt = thread_scratch<float>(kSlotPackedA, m * n);
      bf16_ab(transposed_product(g), i, abt, per_batch);
      const auto& transpose = isa::active().gemm.transpose;
      if (per_batch) {
        transpose(abt, m, n, m, ab, n);
      } else {
        parallel_for(m, n, [&](int64_t r0, int64_t r1) { transpose(abt + r0, m, n, r1 - r0, ab + r0 * n, n); });
      }
    } else {
      bf16_ab(g, i, ab, per_batch);
    }
    if (per_batch) {
      finish_bf16_rows(g, i, bias, ab, 0, m);
    } else {
      parallel_for(m, n, [&](int64_t r0, int64_t r1) { finish_bf16_rows(g, i, bias, ab + r0 * n, r0, r1); });
    }
  };
  if (g.batch > 1 && per_batch && threads > 1) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < g.batch; ++i) one(i);
  }
}

}  // namespace

void CpuKernels::gemm_impl(const GemmArgs& args) {
  if (args.m == 0 || args.n == 0) return;
  if (args.a.dtype == DType::BF16 && args.c.dtype != DType::F64 && packed_gemm_bf16::available() && args.k > 0) {
    return gemm_bf16(args);
  }
  // fp64 anywhere means a gradcheck: compute in fp64. Otherwise fp32, half types included.
  if (args.a.dtype == DType::F64 || args.c.dtype == DType::F64) {
    gemm_typed<double>(args);
  } else {
    gemm_typed<float>(args);
  }
}

}  // namespace demi::backend::cpu

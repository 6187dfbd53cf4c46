// The packed fp32 GEMM tile on AVX2 + FMA (compiled with -mavx2 -mfma): 4 rows x 24 columns, 12 ymm
// accumulators + 3 B vectors + 1 broadcast fill the 16 registers; 4-row panels divide every channel
// count of SmallCNN and AirNet. Also the 4 x 3 dot tile (isa.h) and the 8x8- and 4x8-block transpose the
// AVX-512 table shares.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kRows = 4, kLanes = 8;

// V vectors of 8 columns; kEdge: the last vector holds fewer than 8 valid columns (masked).
template <int V, bool kEdge>
void tile(const F32TileArgs& t) {
  const __m256i last = lane_mask(t.cols - kLanes * (V - 1));
  auto load = [&](const float* p, int v) { return kEdge && v == V - 1 ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p); };
  __m256 acc[kRows][V];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const __m256 start = t.init && !t.accumulate && r < t.rows ? _mm256_set1_ps(t.init[r]) : _mm256_setzero_ps();
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[r][v] = start;
  }
  for (int64_t j = 0; j < t.k; ++j) {
    const float* brow = t.b + j * t.ldb;
    __m256 bv[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) bv[v] = load(brow + kLanes * v, v);
    const float* ap = t.a_panel + j * kRows;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  // Constant bounds with a break, so that acc is indexed by constants only and stays in registers.
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    if (r >= t.rows) break;
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      float* out = t.c + r * t.ldc + kLanes * v;
      const __m256 sum = t.accumulate ? _mm256_add_ps(acc[r][v], load(out, v)) : acc[r][v];
      if (kEdge && v == V - 1) {
        _mm256_maskstore_ps(out, last, sum);
      } else {
        _mm256_storeu_ps(out, sum);
      }
    }
  }
}

void tile_entry(const F32TileArgs& t) {
  if (t.cols > 16) {
    t.cols == 24 ? tile<3, false>(t) : tile<3, true>(t);
  } else if (t.cols > 8) {
    t.cols == 16 ? tile<2, false>(t) : tile<2, true>(t);
  } else {
    t.cols == 8 ? tile<1, false>(t) : tile<1, true>(t);
  }
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for an 8 x 8 block.
void transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // r_i[0] r_i+1[0] r_i[1] r_i+1[1] | [4], [5]
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // the same for columns 2, 3 | 6, 7
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));          // column 0 | 4 of 4 rows
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));      // column 1 | 5
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));  // column 2 | 6
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));  // column 3 | 7
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for a 4 x 8 block: 8 rows of 4 out.
void transpose4x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + src_stride);
  const __m256 r2 = _mm256_loadu_ps(src + 2 * src_stride), r3 = _mm256_loadu_ps(src + 3 * src_stride);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);  // as in transpose8x8
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 c[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),   // column 0 | 4
                       _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),   // column 1 | 5
                       _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),   // column 2 | 6
                       _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};  // column 3 | 7
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_ps(dst + i * dst_stride, _mm256_castps256_ps128(c[i]));
    _mm_storeu_ps(dst + (i + 4) * dst_stride, _mm256_extractf128_ps(c[i], 1));
  }
}

// The dot tile: a 4 x 3 block of C as 12 accumulators of 8 partial sums along k (with 3 B vectors
// and one A vector, all 16 registers), folded by hadd at the end. Rows past `rows` (columns past
// `cols`) read row 0 again and are dropped.
constexpr int64_t kDotRows = 4, kDotCols = 3;

// One step of k (8 values, loaded by `load`): acc[3 * r + c] += a[r] * b[c]. Inlined, so that acc
// stays in registers.
template <typename Load>
[[gnu::always_inline]] inline void dot_step(__m256 (&acc)[12], const float* const (&a)[kDotRows],
                                            const float* const (&b)[kDotCols], int64_t j, Load load) {
  __m256 bv[kDotCols];
#pragma GCC unroll 3
  for (int c = 0; c < kDotCols; ++c) bv[c] = load(b[c] + j);
#pragma GCC unroll 4
  for (int r = 0; r < kDotRows; ++r) {
    __m256 av = load(a[r] + j);
    asm("" : "+x"(av));  // one load into a register: GCC would fold it into all three FMAs
#pragma GCC unroll 3
    for (int c = 0; c < kDotCols; ++c) acc[3 * r + c] = _mm256_fmadd_ps(av, bv[c], acc[3 * r + c]);
  }
}

// One block of the strip (cols <= kDotCols).
[[gnu::always_inline]] inline void dot_block(const F32DotArgs& t, const float* b0, float* c, int64_t cols) {
  const float* a[kDotRows];
  const float* b[kDotCols];
  for (int64_t i = 0; i < kDotRows; ++i) a[i] = t.a + (i < t.rows ? i : 0) * t.lda;
  for (int64_t i = 0; i < kDotCols; ++i) b[i] = b0 + (i < cols ? i : 0) * t.ldb;
  __m256 acc[kDotRows * kDotCols];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + kLanes <= t.k; j += kLanes) dot_step(acc, a, b, j, [](const float* p) { return _mm256_loadu_ps(p); });
  if (j < t.k) {
    const __m256i last = lane_mask(t.k - j);
    dot_step(acc, a, b, j, [&](const float* p) { return _mm256_maskload_ps(p, last); });
  }
  // hadd(hadd(acc i, i+1), hadd(acc i+2, i+3)) holds those four sums' halves in its 128-bit lanes.
  alignas(16) float sum[12];  // [3 * r + c]
#pragma GCC unroll 3
  for (int i = 0; i < 12; i += 4) {
    const __m256 g = _mm256_hadd_ps(_mm256_hadd_ps(acc[i], acc[i + 1]), _mm256_hadd_ps(acc[i + 2], acc[i + 3]));
    _mm_store_ps(sum + i, _mm_add_ps(_mm256_castps256_ps128(g), _mm256_extractf128_ps(g, 1)));
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      float& out = c[r * t.ldc + j];
      out = t.accumulate ? out + sum[3 * r + j] : sum[3 * r + j];
    }
  }
}

void dot_tile(const F32DotArgs& t) {
  for (int64_t j = 0; j < t.cols; j += kDotCols) dot_block(t, t.b + j * t.ldb, t.c + j, std::min(kDotCols, t.cols - j));
}

}  // namespace

void transpose_avx2(const float* src, int64_t src_stride, int64_t m, int64_t n, float* dst, int64_t dst_stride) {
  int64_t i0 = 0;
  for (; i0 + 8 <= m; i0 += 8) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) transpose8x8(src + i0 * src_stride + j, src_stride, dst + j * dst_stride + i0, dst_stride);
    for (; j < n; ++j) {
      for (int64_t i = i0; i < i0 + 8; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
  }
  // 4 rows left: pack_a's whole panels at AVX2's 4-row tile, which went element by element (a 256 x
  // 128 Winograd operand per point in AirNet's backward-weight: 2% of its step).
  if (i0 + 4 <= m) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) transpose4x8(src + i0 * src_stride + j, src_stride, dst + j * dst_stride + i0, dst_stride);
    for (; j < n; ++j) {
      for (int64_t i = i0; i < i0 + 4; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
    i0 += 4;
  }
  for (int64_t i = i0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

extern const F32Gemm kGemmAvx2 = {kRows, 3 * kLanes, tile_entry, transpose_avx2, kDotRows, kDotCols, dot_tile, false};

}  // namespace demi::backend::cpu::isa

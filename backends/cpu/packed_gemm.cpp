// The walks and packing of packed_gemm.h, once for every ISA level: the tiles themselves come from
// the active level's table (isa/isa.h), so only mr, nr and kb differ between machines.
#include "backends/cpu/packed_gemm.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/common.h"
#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::packed_gemm {
namespace {
// The bytes of B that gemm_nt keeps in L1 (half of a 32 KiB L1d; A's rows share the rest).
constexpr int64_t kDotL1Bytes = 16 << 10;
// gemm's blocks of B: kDepthBlock rows of one strip (24 KiB of a 48-column AVX-512 strip), copied
// when C has at least kMinPanelsToCopy panels of rows and the block more than kCopyDepth rows
// (fewer fit L1's ways in place; SmallCNN's 32- and 64-deep products ran 1-2% slower copied).
constexpr int64_t kDepthBlock = 128, kMaxTileCols = 64, kMinPanelsToCopy = 8, kCopyDepth = 64;
}  // namespace

int64_t packed_size(int64_t m, int64_t k) {
  const int64_t mr = isa::active().gemm.mr;
  return (m + mr - 1) / mr * mr * k;
}

void pack_a(const float* a, int64_t row_stride, int64_t col_stride, int64_t m, int64_t k, float* out) {
  const isa::F32Gemm& t = isa::active().gemm;
  // Panels spread over the threads (serially inside a parallel region): a convolution's weights
  // are packed once per call by the calling thread, 2.4 MiB for AirNet's last layer.
  parallel_for((m + t.mr - 1) / t.mr, 2 * t.mr * k, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin * t.mr; p < std::min(m, end * t.mr); p += t.mr) {
      const int64_t rows = std::min(t.mr, m - p);
      float* panel = out + p * k;
      if (rows == t.mr && col_stride == 1) {  // a full panel of a row-major A: a transpose
        t.transpose(a + p * row_stride, row_stride, t.mr, k, panel, t.mr);
        continue;
      }
      for (int64_t j = 0; j < k; ++j) {
        for (int64_t r = 0; r < rows; ++r) panel[j * t.mr + r] = a[(p + r) * row_stride + j * col_stride];
        for (int64_t r = rows; r < t.mr; ++r) panel[j * t.mr + r] = 0.0f;
      }
    }
  });
}

namespace {
// Whether rows ld floats apart start an odd number of 64-byte lines apart.
bool odd_line_rows(int64_t ld) { return ld % 16 == 0 && (ld / 16) % 2 == 1; }

// The width of the next column strip, `left` columns from the end: nr, except where that would
// leave a last strip of at most a third of nr (one vector) whose tile has fewer than 8 sums in
// flight (mr of them: 4 on AVX2, against an FMA latency of 4 cycles on two ports, half the rate).
// The last nr + r columns are then two strips of about half each, in whole 8-column vectors: 128
// columns (the Winograd GEMMs of AirNet's 15x15, 7x7 and 3x3 layers) as 4 x 24 + 2 x 16, not
// 5 x 24 + 8. Each column's sum is the same either way.
int64_t strip_width(int64_t mr, int64_t nr, int64_t left) {
  if (mr >= 8 || left <= nr || left - nr > nr / 3) return std::min(nr, left);
  return (left / 2 + 7) / 8 * 8;
}

// gemm and gemm_bt: B given as itself (k x n) or as its transpose (n x k, then always copied,
// transposed, into the strip).
void gemm_strips(const float* a_packed, int64_t m, int64_t k, const float* b, int64_t ldb, bool b_transposed,
                 int64_t n, float* c, int64_t ldc, const float* init, Accumulate accumulate) {
  const isa::F32Gemm& t = isa::active().gemm;
  // Column strips outermost, each cut into blocks of kDepthBlock rows of B, which every panel of A
  // passes over while the block stays in L1. With enough panels to pay for it, a block whose rows
  // are an even number of lines apart is first copied into contiguous rows: read in place, its rows
  // fell into a quarter of L1's sets and were fetched from L2 for every panel (AirNet's Winograd
  // GEMMs at 128-column rows, 256 x 256 x 128: 200 GFLOP/s a core against 217 with the copy, AMX
  // Xeon). Rows an odd number of lines apart spread over all the sets, and are read in place: the
  // Winograd walks pad their rows so (AirNet's 64 -> 256 @ 15 backward-data then ran 9% faster,
  // its 256 -> 256 @ 7 forward 1%).
  alignas(64) static thread_local float strip[kDepthBlock * kMaxTileCols];
  DEMI_INTERNAL_CHECK(t.nr <= kMaxTileCols, "packed_gemm: tile of ", t.nr, " columns");
  for (int64_t col = 0, cols = 0; col < n; col += cols) {
    cols = strip_width(t.mr, t.nr, n - col);
    for (int64_t k0 = 0; k0 == 0 || k0 < k; k0 += kDepthBlock) {  // k = 0 still writes C = init
      const int64_t depth = std::min(kDepthBlock, k - k0);
      const float* block = strip;  // the tile reads B's block from the strip, or in place
      int64_t ld = t.nr;
      if (b_transposed) {
        t.transpose(b + col * ldb + k0, ldb, cols, depth, strip, t.nr);
      } else if (m >= kMinPanelsToCopy * t.mr && depth > kCopyDepth && !odd_line_rows(ldb)) {
        const float* src = b + k0 * ldb + col;
        for (int64_t j = 0; j < depth; ++j) std::memcpy(strip + j * t.nr, src + j * ldb, sizeof(float) * cols);
      } else {
        block = b + k0 * ldb + col;
        ld = ldb;
      }
      // Blocks after the first add their sums to C (the tile's accumulate: each block's sum
      // starts from 0, as the caller's accumulate does).
      const bool add = k0 > 0 || accumulate == Accumulate::Yes;
      for (int64_t p = 0; p < m; p += t.mr) {
        t.tile({a_packed + p * k + k0 * t.mr, block, ld, c + p * ldc + col, ldc, depth, std::min(t.mr, m - p), cols,
                init && k0 == 0 ? init + p : nullptr, add});
      }
    }
  }
}
}  // namespace

void gemm(const float* a_packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
          const float* init, Accumulate accumulate) {
  gemm_strips(a_packed, m, k, b, ldb, false, n, c, ldc, init, accumulate);
}

void gemm_bt(const float* a_packed, int64_t m, int64_t k, const float* bt, int64_t ldbt, int64_t n, float* c,
             int64_t ldc, Accumulate accumulate) {
  gemm_strips(a_packed, m, k, bt, ldbt, true, n, c, ldc, nullptr, accumulate);
}

int64_t packed_b_size(int64_t k, int64_t n) {
  const int64_t nr = isa::active().gemm.nr;
  return (n + nr - 1) / nr * nr * k;
}

void pack_b(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* out) {
  const isa::F32Gemm& t = isa::active().gemm;
  DEMI_INTERNAL_CHECK(row_stride == 1 || col_stride == 1, "pack_b: B must be row-major or transposed, got strides ",
                      row_stride, " and ", col_stride);
  parallel_for((n + t.nr - 1) / t.nr, 2 * t.nr * k, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t col = s * t.nr, cols = std::min(t.nr, n - col);
      float* strip = out + col * k;
      if (row_stride == 1) {  // B given as its transpose: its rows are the strip's columns
        t.transpose(b + col * col_stride, col_stride, cols, k, strip, t.nr);
      } else {
        for (int64_t j = 0; j < k; ++j) std::memcpy(strip + j * t.nr, b + j * row_stride + col, sizeof(float) * cols);
      }
    }
  });
}

void gemm_packed_b(const float* a_packed, const float* b_packed, int64_t k, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, float* c, int64_t ldc, Accumulate accumulate) {
  const isa::F32Gemm& t = isa::active().gemm;
  // GotoBLAS's blocking, with A and B in the roles the tile gives them: a block of A's panels
  // (kPanelBlockBytes, kept in L2) meets every strip of B in turn, kDepthBlock rows of the strip
  // (kept in L1) at a time, each passed over by all of the block's panels.
  const int64_t row_block = std::max<int64_t>(1, kPanelBlockBytes / (int64_t{sizeof(float)} * t.mr * std::max<int64_t>(k, 1))) * t.mr;
  for (int64_t q0 = r0; q0 < r1; q0 += row_block) {
    const int64_t q1 = std::min(r1, q0 + row_block);
    for (int64_t col = c0; col < c1; col += t.nr) {
      const int64_t cols = std::min(t.nr, c1 - col);
      for (int64_t k0 = 0; k0 == 0 || k0 < k; k0 += kDepthBlock) {  // k = 0 still writes C = 0
        const int64_t depth = std::min(kDepthBlock, k - k0);
        const bool add = k0 > 0 || accumulate == Accumulate::Yes;
        for (int64_t p = q0; p < q1; p += t.mr) {
          t.tile({a_packed + p * k + k0 * t.mr, b_packed + col * k + k0 * t.nr, t.nr, c + p * ldc + col, ldc, depth,
                  std::min(t.mr, q1 - p), cols, nullptr, add});
        }
      }
    }
  }
}

void gemm_nt(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t n, int64_t k, float* c,
             int64_t ldc, Accumulate accumulate) {
  const isa::F32Gemm& t = isa::active().gemm;
  // A block of B's rows stays in L1 while A's rows pass over it, dr at a time: each B row is read
  // from L2 once, each A row once per block (streaming all of B past every dr rows of A read it
  // m / dr times, and lost to the packed GEMM on 64 x 128 products).
  const int64_t rows_in_l1 = std::max<int64_t>(1, kDotL1Bytes / (sizeof(float) * std::max<int64_t>(k, 1)) / t.dc);
  const int64_t block = rows_in_l1 * t.dc;
  for (int64_t j0 = 0; j0 < n; j0 += block) {
    const int64_t j1 = std::min(n, j0 + block);
    for (int64_t i = 0; i < m; i += t.dr) {  // dr rows of A against the block, one call
      t.dot_tile({a + i * lda, lda, b + j0 * ldb, ldb, c + i * ldc + j0, ldc, k, std::min(t.dr, m - i), j1 - j0,
                  accumulate == Accumulate::Yes});
    }
  }
}

}  // namespace demi::backend::cpu::packed_gemm

namespace demi::backend::cpu::packed_gemm_bf16 {
namespace {
int64_t round_up(int64_t v, int64_t step) { return (v + step - 1) / step * step; }
// gemm's block of k for products with more than twice as many (a multiple of every level's kb).
constexpr int64_t kKBlock = 1024;
}  // namespace

bool available() { return isa::active().bf16_route != isa::Bf16Route::Widen; }
int64_t k_padded(int64_t k) { return round_up(std::max<int64_t>(k, 1), isa::active().bf16.kb); }
int64_t m_padded(int64_t m) { return round_up(std::max<int64_t>(m, 1), isa::active().bf16.mr); }
int64_t n_padded(int64_t n) { return round_up(std::max<int64_t>(n, 1), isa::active().bf16.nr); }

namespace {
// dst[c * dst_ld + r] = src[r * src_ld + c] for an 8 x 8 block of 16-bit values: three rounds of
// interleaves (SSE2, in every x86-64), 8 loads and 8 stores instead of 64 scalar moves.
void transpose_8x8_u16(const uint16_t* src, int64_t src_ld, uint16_t* dst, int64_t dst_ld) {
#if defined(__SSE2__)
  __m128i r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  // t[0..3]: rows 0-3 interleaved in pairs; t[4..7]: rows 4-7.
  const __m128i u0 = _mm_unpacklo_epi32(t[0], t[2]), u1 = _mm_unpackhi_epi32(t[0], t[2]);
  const __m128i u2 = _mm_unpacklo_epi32(t[1], t[3]), u3 = _mm_unpackhi_epi32(t[1], t[3]);
  const __m128i u4 = _mm_unpacklo_epi32(t[4], t[6]), u5 = _mm_unpackhi_epi32(t[4], t[6]);
  const __m128i u6 = _mm_unpacklo_epi32(t[5], t[7]), u7 = _mm_unpackhi_epi32(t[5], t[7]);
  const __m128i cols[8] = {_mm_unpacklo_epi64(u0, u4), _mm_unpackhi_epi64(u0, u4), _mm_unpacklo_epi64(u1, u5),
                           _mm_unpackhi_epi64(u1, u5), _mm_unpacklo_epi64(u2, u6), _mm_unpackhi_epi64(u2, u6),
                           _mm_unpacklo_epi64(u3, u7), _mm_unpackhi_epi64(u3, u7)};
  for (int c = 0; c < 8; ++c) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c * dst_ld), cols[c]);
#else
  for (int c = 0; c < 8; ++c)
    for (int r = 0; r < 8; ++r) dst[c * dst_ld + r] = src[r * src_ld + c];
#endif
}
}  // namespace

void pack_a(const uint16_t* a, int64_t row_stride, int64_t col_stride, int64_t m, int64_t k, uint16_t* out) {
  const int64_t kp = k_padded(k);
  // A column-major A (a transposed operand: a weight gradient's grad_y^T) is read in blocks of 32
  // rows x 64 columns, whose 64 source lines stay in L1 while the 32 rows take them in turn; one
  // element per line and row would fetch every line 32 times (CCT-7's in-projection gradient:
  // 233 -> 72 ms).
  constexpr int64_t kRows = 32, kCols = 64;
  parallel_for((m + kRows - 1) / kRows, 2 * kRows * kp, [&](int64_t begin, int64_t end) {
    for (int64_t i0 = begin * kRows; i0 < std::min(m, end * kRows); i0 += kRows) {
      const int64_t i1 = std::min(m, i0 + kRows);
      if (col_stride == 1) {
        for (int64_t i = i0; i < i1; ++i) std::memcpy(out + i * kp, a + i * row_stride, sizeof(uint16_t) * k);
        continue;
      }
      for (int64_t j0 = 0; j0 < k; j0 += kCols) {
        const int64_t j1 = std::min(k, j0 + kCols);
        if (row_stride == 1 && i1 - i0 == kRows && j1 - j0 == kCols) {  // A^T of a row-major matrix, whole block
          for (int64_t i = i0; i < i1; i += 8)
            for (int64_t j = j0; j < j1; j += 8) transpose_8x8_u16(a + i + j * col_stride, col_stride, out + i * kp + j, kp);
          continue;
        }
        for (int64_t i = i0; i < i1; ++i) {
          uint16_t* row = out + i * kp;
          for (int64_t j = j0; j < j1; ++j) row[j] = a[i * row_stride + j * col_stride];
        }
      }
    }
  });
  pad_a(out, kp, m, k);
}

void pad_a(uint16_t* a, int64_t lda, int64_t m, int64_t k) {
  for (int64_t i = 0; i < m; ++i) std::memset(a + i * lda + k, 0, sizeof(uint16_t) * (lda - k));
  std::memset(a + m * lda, 0, sizeof(uint16_t) * lda * (m_padded(m) - m));
}

int64_t b_size(int64_t k, int64_t n) { return k_padded(k) * n_padded(n); }

const uint16_t* b_columns(const uint16_t* b, int64_t k, int64_t col0) {
  const int64_t nr = isa::active().bf16.nr;
  return b + col0 / nr * (k_padded(k) * nr);
}

namespace {
// Calls fn(dst, first, count) for the runs of columns [col0, col0 + n) that share a strip: dst is
// pair row 0 of the strip at the run's first column, `first` the run's offset in [0, n).
template <typename Fn>
void for_each_strip_run(uint16_t* out, int64_t k, int64_t col0, int64_t n, Fn&& fn) {
  const int64_t nr = isa::active().bf16.nr, strip = k_padded(k) * nr;
  for (int64_t c = 0; c < n;) {
    const int64_t col = col0 + c, within = col % nr, count = std::min(n - c, nr - within);
    fn(out + col / nr * strip + 2 * within, c, count);
    c += count;
  }
}
}  // namespace

void pack_b(const uint16_t* b, int64_t src_ld, int64_t k, int64_t n, uint16_t* out, int64_t col0) {
  const int64_t ldb = 2 * isa::active().bf16.nr;
  // Pair rows spread over the threads (a weight gradient's B has tens of thousands of rows).
  parallel_for((k + 1) / 2, 2 * n, [&](int64_t j_begin, int64_t j_end) {
    for_each_strip_run(out, k, col0, n, [&](uint16_t* strip, int64_t first, int64_t count) {
      for (int64_t j = j_begin; j < j_end; ++j) {
        const uint16_t* r0 = b + 2 * j * src_ld + first;
        const uint16_t* r1 = 2 * j + 1 < k ? r0 + src_ld : nullptr;  // odd k: the last pair's second row is 0
        uint16_t* dst = strip + j * ldb;
        for (int64_t c = 0; c < count; ++c) {
          dst[2 * c] = r0[c];
          dst[2 * c + 1] = r1 ? r1[c] : 0;
        }
      }
    });
  });
}

void pack_bt(const uint16_t* bt, int64_t src_ld, int64_t k, int64_t n, uint16_t* out, int64_t col0) {
  const int64_t ldb = 2 * isa::active().bf16.nr, pairs = k / 2;
  for_each_strip_run(out, k, col0, n, [&](uint16_t* strip, int64_t first, int64_t count) {
    const uint16_t* src = bt + first * src_ld;
    if (src_ld % 2 == 0) {
      // Each (B[2j][c], B[2j + 1][c]) is one 32-bit word of bt's row c: transposing the words (the
      // transpose entry only moves bits) lays B out in pairs.
      isa::active().gemm.transpose(reinterpret_cast<const float*>(src), src_ld / 2, count, pairs,
                                   reinterpret_cast<float*>(strip), ldb / 2);
    } else {
      for (int64_t j = 0; j < pairs; ++j) {
        for (int64_t c = 0; c < count; ++c) {
          strip[j * ldb + 2 * c] = src[c * src_ld + 2 * j];
          strip[j * ldb + 2 * c + 1] = src[c * src_ld + 2 * j + 1];
        }
      }
    }
    if (k % 2) {
      for (int64_t c = 0; c < count; ++c) {
        strip[pairs * ldb + 2 * c] = src[c * src_ld + k - 1];
        strip[pairs * ldb + 2 * c + 1] = 0;
      }
    }
  });
}

void pad_b(uint16_t* out, int64_t k, int64_t n) {
  const int64_t nr = isa::active().bf16.nr, ldb = 2 * nr, used = (k + 1) / 2, rows = k_padded(k) / 2;
  const int64_t strips = n_padded(n) / nr, last = n - (strips - 1) * nr;
  for (int64_t s = 0; s < strips; ++s) {
    uint16_t* strip = out + s * rows * ldb;
    if (s == strips - 1 && last < nr) {
      for (int64_t j = 0; j < used; ++j) std::memset(strip + j * ldb + 2 * last, 0, sizeof(uint16_t) * 2 * (nr - last));
    }
    std::memset(strip + used * ldb, 0, sizeof(uint16_t) * ldb * (rows - used));
  }
}

void gemm(const uint16_t* a, int64_t lda, int64_t m, int64_t k, const uint16_t* b, int64_t n, float* c, int64_t ldc,
          const float* init, Accumulate accumulate) {
  const isa::Bf16Gemm& t = isa::active().bf16;
  if (t.prepare) t.prepare();
  const int64_t kp = k_padded(k), strip = kp * t.nr;
  // A long k (a weight gradient sums over every token of the batch) is taken in blocks, each
  // added into C: a block's rows of A stay in L2 while every strip of B meets them, where one pass
  // over all of k would stream A from memory once per strip.
  const int64_t block = kp > 2 * kKBlock ? kKBlock : kp;
  for (int64_t k0 = 0; k0 < kp; k0 += block) {
    const int64_t kl = std::min(block, kp - k0);
    const bool add = accumulate == Accumulate::Yes || k0 > 0;
    for (int64_t col = 0; col < n; col += t.nr) {
      const int64_t cols = std::min(t.nr, n - col);
      const uint16_t* bs = b + col / t.nr * strip + k0 * t.nr;  // pair row k0 / 2 of the strip
      for (int64_t p = 0; p < m; p += t.mr) {
        t.tile({a + p * lda + k0, lda, bs, 2 * t.nr, c + p * ldc + col, ldc, kl, std::min(t.mr, m - p), cols,
                init && k0 == 0 ? init + p : nullptr, add, 1, nullptr, nullptr});
      }
    }
  }
}

}  // namespace demi::backend::cpu::packed_gemm_bf16

// The GEMMs of the convolutions (and of bf16 matmuls), with the tile shape of the ISA level in use
// (isa/isa.h): C[m, n] = init[m] + sum_k A[m, k] B[k, n], A small and reused (the weights, or their
// transpose), packed once per call into panels of the tile's rows, B and C row-major with a row
// stride, walked in column strips of the tile's width. Eigen's GEMM packs both operands on every
// call, which for the convolutions' small per-image products (32..256 rows) cost ~20% of the time.
//
// fp32 (packed_gemm): B (im2col columns, grad_y rows) is read in place, column edges masked.
// bf16 (packed_gemm_bf16, where the level has a bf16 tile): A and B are bf16 (uint16_t bits), C fp32;
// A in panels of rows zero-padded to the tile's k granularity, B in "VNNI" pairs of k rows (isa.h)
// cut into strips of the tile's columns.
#pragma once

#include <cstdint>

namespace demi::backend::cpu::packed_gemm {

// Floats pack_a needs for an m x k matrix: whole panels of the tile's rows.
int64_t packed_size(int64_t m, int64_t k);
// Packs A[i, j] = a[i * row_stride + j * col_stride] (m x k) into panels: panel p holds, for each
// j, the tile's rows of A[p * rows + r, j] (0 past row m).
void pack_a(const float* a, int64_t row_stride, int64_t col_stride, int64_t m, int64_t k, float* out);
// C (m x n, row stride ldc) = init + packed A (m x k) * B (k x n, row stride ldb), or with
// Accumulate::Yes C += A * B. init: m values (one per row of C) or nullptr.
enum class Accumulate { No, Yes };
void gemm(const float* a_packed, int64_t m, int64_t k, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
          const float* init, Accumulate accumulate = Accumulate::No);
// The same with B given as its transpose bt (n x k, row stride ldbt), without init: each block of B
// is transposed straight into the L1 strip the tile reads (no transposed copy of all of B first).
void gemm_bt(const float* a_packed, int64_t m, int64_t k, const float* bt, int64_t ldbt, int64_t n, float* c,
             int64_t ldc, Accumulate accumulate = Accumulate::No);

// Floats pack_b needs for a k x n matrix: whole strips of the tile's columns.
int64_t packed_b_size(int64_t k, int64_t n);
// Packs B[j, i] = b[j * row_stride + i * col_stride] (k x n; row-major, col_stride 1, or given as
// its transpose, row_stride 1) into strips of the tile's columns:
// strip s holds, for each j, B[j, s * nr + i] for i < nr, contiguous (columns past n unwritten:
// the tile never reads them). For products large enough that every strip is read many times.
void pack_b(const float* b, int64_t row_stride, int64_t col_stride, int64_t k, int64_t n, float* out);
// The bytes of A's panels gemm_packed_b keeps in L2 while B's strips pass (half a 2 MiB L2).
constexpr int64_t kPanelBlockBytes = int64_t{1} << 20;
// Rows [r0, r1) (r0 a multiple of the tile's rows) and columns [c0, c1) (c0 a multiple of its
// columns) of C (row stride ldc) = A * B, or += A * B, for A (m x k) packed by pack_a and B (k x n)
// by pack_b; serial: the caller spreads the blocks of C over its threads.
void gemm_packed_b(const float* a_packed, const float* b_packed, int64_t k, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, float* c, int64_t ldc, Accumulate accumulate = Accumulate::No);

// C (m x n, row stride ldc) = A * B^T, or with Accumulate::Yes C += A * B^T, for A (m x k) and B
// (n x k) both row-major (row strides lda, ldb): sums of products of two k-contiguous rows, as
// backward-weight's are, with neither operand packed nor transposed (the dot tile, isa.h).
void gemm_nt(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t n, int64_t k, float* c,
             int64_t ldc, Accumulate accumulate = Accumulate::No);

}  // namespace demi::backend::cpu::packed_gemm

namespace demi::backend::cpu::packed_gemm_bf16 {

using packed_gemm::Accumulate;

// Whether the ISA level in use sends bf16 GEMMs to its bf16 tile (isa::Bf16Route; else bf16 is
// widened into the fp32 GEMM).
bool available();
// k rounded up to the tile's k granularity: the row length of A and twice the rows of B.
int64_t k_padded(int64_t k);
// m rounded up to whole panels: the rows an A buffer must hold.
int64_t m_padded(int64_t m);
// n rounded up to whole column tiles: the columns a B buffer must hold.
int64_t n_padded(int64_t n);

// A (m x k, element [i, j] at a[i * row_stride + j * col_stride]) into out: m_padded(m) rows of
// k_padded(k) values, zero past m and k. A matrix already laid out so (row stride lda) needs no packing.
void pack_a(const uint16_t* a, int64_t row_stride, int64_t col_stride, int64_t m, int64_t k, uint16_t* out);
// Zeroes columns [k, lda) of m rows (row stride lda) and rows [m, m_padded(m)): what pack_a would
// have zero-filled, for an A written in place (backward-weight's im2col).
void pad_a(uint16_t* a, int64_t lda, int64_t m, int64_t k);
// B (k x n) in pairs of k rows, in strips of the tile's columns (so that a tile reads one block,
// not rows a whole matrix apart): strip s holds k_padded(k) / 2 rows of 2 * nr bf16, row j
// (B[2j][c], B[2j + 1][c]) for the strip's columns c. b_size(k, n) bf16 in all.
int64_t b_size(int64_t k, int64_t n);
// The strip of column col0 (a multiple of the tile's columns), for a GEMM over columns from col0.
const uint16_t* b_columns(const uint16_t* b, int64_t k, int64_t col0);
// Columns [col0, col0 + n) of B in pairs from a row-major k x n matrix (row stride src_ld).
void pack_b(const uint16_t* b, int64_t src_ld, int64_t k, int64_t n, uint16_t* out, int64_t col0);
// The same from B's transpose: bt is n x k (row stride src_ld), B[j][c] = bt[c][j].
void pack_bt(const uint16_t* bt, int64_t src_ld, int64_t k, int64_t n, uint16_t* out, int64_t col0);
// Zeroes the pair rows past k (up to k_padded(k)) and the columns [n, n_padded(n)).
void pad_b(uint16_t* out, int64_t k, int64_t n);

// C (m x n, fp32, row stride ldc) = init + A * B, or C += A * B: A as pack_a leaves it (row stride
// lda), B packed in pairs (from b_columns for a later first column) and padded by pad_b.
void gemm(const uint16_t* a, int64_t lda, int64_t m, int64_t k, const uint16_t* b, int64_t n, float* c, int64_t ldc,
          const float* init, Accumulate accumulate = Accumulate::No);

}  // namespace demi::backend::cpu::packed_gemm_bf16

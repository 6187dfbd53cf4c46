// Pins packed_gemm::gemm (backends/cpu/packed_gemm.cpp), the fp32 walk under the convolutions, to a
// naive fp64 loop: column strips cut into depth blocks of 128 rows, copied into contiguous rows
// when C has 8 or more panels and the block is deeper than 64 rows, with init (bias) and
// accumulate, and a last strip of at most a vector shared with the one before it. The shapes
// straddle each of those limits. gemm_bt (B given transposed, every block transposed into the
// strip) runs the same cases without init; pack_b and gemm_packed_b (the matmuls' path) are pinned
// the same way. Every case runs once per ISA level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/cpu/packed_gemm.h"
#include "support/tolerance.h"

namespace demi::backend::cpu {
namespace {

struct Case {
  const char* name;
  int64_t m, k, n;
  bool init, accumulate;
};

const Case kCases[] = {
    {"depth_zero_writes_init", 16, 0, 50, true, false},
    {"depth_zero_accumulates_nothing", 16, 0, 50, false, true},
    {"one_block_in_place", 24, 100, 96, true, false},             // 3 panels of 8: never copied
    {"blocks_in_place", 40, 300, 130, true, false},               // 5 panels: 128 + 128 + 44 rows in place
    {"copied_blocks_and_a_partial_strip", 64, 300, 130, true, false},
    {"copied_block_of_one_row_past", 72, 129, 96, false, true},   // 128 copied, then 1 row in place
    {"shallow_block_in_place", 64, 64, 100, true, false},         // 64 rows: read in place
    {"copied_ragged_rows_and_columns", 70, 200, 47, true, true},  // the last panel partial
    {"narrow_last_strip_shared", 12, 40, 128, true, true},         // AVX2: 4 x 24 + 2 x 16, not 5 x 24 + 8
    {"narrow_ragged_strip_shared", 8, 40, 25, false, true},        // AVX2: 16 + 9, not 24 + 1
};

std::string describe(const Case& c) {
  std::ostringstream out;
  out << c.name << " m=" << c.m << " k=" << c.k << " n=" << c.n << " init=" << c.init << " accumulate=" << c.accumulate;
  return out.str();
}

class PackedGemm : public demi_test::IsaFixture<isa::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, PackedGemm, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

// Runs case c through gemm, or with b_transposed through gemm_bt (c.init ignored), against fp64.
void expect_matches_fp64(const Case& c, bool b_transposed) {
  SCOPED_TRACE(describe(c) + (b_transposed ? " (gemm_bt)" : ""));
  const bool init = c.init && !b_transposed;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Strides past the columns, as the convolutions' are; B[p][j] at b[p * ldb + j], or for gemm_bt
  // at b[j * ldbt + p].
  const int64_t ldb = c.n + 3, ldbt = c.k + 3, ldc = c.n + 5;
  std::vector<float> a(c.m * c.k), b(b_transposed ? c.n * ldbt : c.k * ldb), init_values(c.m), out(c.m * ldc);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  for (float& v : init_values) v = dist(rng);
  for (float& v : out) v = dist(rng);  // C's previous values: kept with accumulate, else overwritten
  const std::vector<float> before = out;
  std::vector<float> packed(packed_gemm::packed_size(c.m, c.k) + 1);
  packed_gemm::pack_a(a.data(), c.k, 1, c.m, c.k, packed.data());
  const auto accumulate = c.accumulate ? packed_gemm::Accumulate::Yes : packed_gemm::Accumulate::No;
  if (b_transposed) {
    packed_gemm::gemm_bt(packed.data(), c.m, c.k, b.data(), ldbt, c.n, out.data(), ldc, accumulate);
  } else {
    packed_gemm::gemm(packed.data(), c.m, c.k, b.data(), ldb, c.n, out.data(), ldc, init ? init_values.data() : nullptr,
                      accumulate);
  }
  std::vector<double> got, want;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = c.accumulate ? before[i * ldc + j] : (init ? init_values[i] : 0.0);
      for (int64_t p = 0; p < c.k; ++p) {
        sum += double(a[i * c.k + p]) * (b_transposed ? b[j * ldbt + p] : b[p * ldb + j]);
      }
      got.push_back(out[i * ldc + j]);
      want.push_back(sum);
    }
    for (int64_t j = c.n; j < ldc; ++j) {  // the padding past n is never written
      ASSERT_EQ(out[i * ldc + j], before[i * ldc + j]) << "row " << i << " column " << j;
    }
  }
  demi::test::expect_close(got, want, demi::test::accumulated(DType::F32, c.k + 1));
}

TEST_P(PackedGemm, MatchesFp64Reference) {
  for (const Case& c : kCases) expect_matches_fp64(c, false);
}

TEST_P(PackedGemm, GivenBTransposedMatchesFp64Reference) {
  for (const Case& c : kCases) expect_matches_fp64(c, true);
}

// pack_b and gemm_packed_b (CpuKernels::gemm's fp32 path on AVX-512), B given as itself or
// transposed, C formed in four blocks (rows split at a panel, columns at a strip) as the threads
// would form it; k = 5000 makes blocks of rows within each (48 rows at 8-row panels).
TEST_P(PackedGemm, PackedBInBlocksMatchesFp64Reference) {
  const int64_t mr = isa::active().gemm.mr, nr = isa::active().gemm.nr;
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape& sh : {Shape{37, 300, 130}, Shape{100, 5000, 20}, Shape{9, 0, 20}, Shape{70, 129, 47}}) {
    for (const bool b_transposed : {false, true}) {
      for (const bool accumulate : {false, true}) {
        const int64_t m = sh.m, k = sh.k, n = sh.n, ldc = n + 5;
        SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k << " n=" << n << " b_transposed=" << b_transposed
                                          << " accumulate=" << accumulate);
        std::mt19937 rng(17);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<float> a(m * k), b(k * n), out(m * ldc);
        for (float& v : a) v = dist(rng);
        for (float& v : b) v = dist(rng);  // B[p][j] at b[p * n + j], or transposed at b[j * k + p]
        for (float& v : out) v = dist(rng);
        const std::vector<float> before = out;
        std::vector<float> a_packed(packed_gemm::packed_size(m, k) + 1), b_packed(packed_gemm::packed_b_size(k, n) + 1);
        packed_gemm::pack_a(a.data(), k, 1, m, k, a_packed.data());
        packed_gemm::pack_b(b.data(), b_transposed ? 1 : n, b_transposed ? k : 1, k, n, b_packed.data());
        const int64_t row_cut = std::min(m, (m / 2 + mr - 1) / mr * mr), col_cut = std::min(n, nr);
        const auto acc = accumulate ? packed_gemm::Accumulate::Yes : packed_gemm::Accumulate::No;
        for (const auto& [r0, r1] : {std::pair{int64_t{0}, row_cut}, std::pair{row_cut, m}}) {
          for (const auto& [c0, c1] : {std::pair{int64_t{0}, col_cut}, std::pair{col_cut, n}}) {
            if (r0 < r1 && c0 < c1) packed_gemm::gemm_packed_b(a_packed.data(), b_packed.data(), k, r0, r1, c0, c1, out.data(), ldc, acc);
          }
        }
        std::vector<double> got, want;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double sum = accumulate ? before[i * ldc + j] : 0.0;
            for (int64_t p = 0; p < k; ++p) sum += double(a[i * k + p]) * (b_transposed ? b[j * k + p] : b[p * n + j]);
            got.push_back(out[i * ldc + j]);
            want.push_back(sum);
          }
          for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(out[i * ldc + j], before[i * ldc + j]) << "row " << i << " column " << j;
        }
        demi::test::expect_close(got, want, demi::test::accumulated(DType::F32, k + 1));
      }
    }
  }
}

}  // namespace
}  // namespace demi::backend::cpu

// Pins CpuKernels::gemm (backends/cpu/gemm.cpp) to a naive fp64 loop over a table of shapes,
// transposes, batches and dtypes, and checks the half contract: fp32 accumulation, one rounding.
// Every case runs once per ISA level (bf16 takes the level's bf16 tile where it has one).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace demi::backend {
namespace {

struct Case {
  const char* name;
  int64_t m, n, k, batch;
  bool trans_a, trans_b, shared_a, shared_b, bias;
  double alpha, beta;
  bool wide_c;  // C in fp32 while A and B are half (the tensor-core output)
};

std::string describe(const Case& c, DType dtype) {
  std::ostringstream out;
  out << c.name << " dtype=" << dtype << " m=" << c.m << " n=" << c.n << " k=" << c.k << " batch=" << c.batch
      << " trans_a=" << c.trans_a << " trans_b=" << c.trans_b << " alpha=" << c.alpha << " beta=" << c.beta;
  return out.str();
}

void run_case(const Case& cs, DType dtype) {
  SCOPED_TRACE(describe(cs, dtype));
  std::mt19937 rng(1234);
  const DType c_dtype = cs.wide_c && is_half(dtype) ? DType::F32 : dtype;
  const int64_t mk = cs.m * cs.k, kn = cs.k * cs.n, mn = cs.m * cs.n;
  const int64_t na = cs.shared_a ? 1 : cs.batch, nb = cs.shared_b ? 1 : cs.batch;
  HostTensor a(dtype, {na, mk}), b(dtype, {nb, kn}), c(c_dtype, {cs.batch, mn}), bias(dtype, {cs.n});
  a.fill_random(rng);
  b.fill_random(rng);
  c.fill_random(rng);
  bias.fill_random(rng);
  std::vector<double> c_old(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) c_old[i] = c.get(i);

  GemmArgs args;
  args.a = a.ref();
  args.b = b.ref();
  args.c = c.ref();
  if (cs.bias) args.bias = bias.ref();
  args.trans_a = cs.trans_a ? Transpose::Yes : Transpose::No;
  args.trans_b = cs.trans_b ? Transpose::Yes : Transpose::No;
  args.m = cs.m, args.n = cs.n, args.k = cs.k, args.batch = cs.batch;
  args.stride_a = cs.shared_a ? 0 : mk;
  args.stride_b = cs.shared_b ? 0 : kn;
  args.stride_c = mn;
  args.alpha = cs.alpha, args.beta = cs.beta;
  kernels_for(Device::cpu()).gemm(args);

  std::vector<double> want(static_cast<size_t>(c.numel()));
  for (int64_t bi = 0; bi < cs.batch; ++bi) {
    const int64_t oa = cs.shared_a ? 0 : bi * mk, ob = cs.shared_b ? 0 : bi * kn;
    for (int64_t i = 0; i < cs.m; ++i) {
      for (int64_t j = 0; j < cs.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < cs.k; ++p) {
          const double av = a.get(oa + (cs.trans_a ? p * cs.m + i : i * cs.k + p));
          const double bv = b.get(ob + (cs.trans_b ? j * cs.k + p : p * cs.n + j));
          sum += av * bv;
        }
        const int64_t ci = bi * mn + i * cs.n + j;
        double ref = cs.alpha * sum + (cs.beta != 0 ? cs.beta * c_old[ci] : 0.0);
        if (cs.bias) ref += bias.get(j);
        want[static_cast<size_t>(ci)] = ref;
      }
    }
  }
  expect_close(c, want, accumulated(c_dtype, cs.k), "C [batch][m][n]");
}

const Case kCases[] = {
    // name              m    n    k   batch ta     tb     sh_a   sh_b   bias   alpha beta wide
    {"square", 64, 64, 64, 1, false, false, false, false, false, 1.0, 0.0, false},
    {"non_square", 37, 53, 29, 1, false, false, false, false, false, 1.0, 0.0, false},
    {"trans_a", 31, 47, 61, 1, true, false, false, false, false, 1.0, 0.0, false},
    {"trans_b", 31, 47, 61, 1, false, true, false, false, false, 1.0, 0.0, false},
    {"trans_both", 31, 47, 61, 1, true, true, false, false, false, 1.0, 0.0, false},
    {"bias_alpha_beta", 17, 33, 40, 1, false, true, false, false, true, 0.5, 0.75, false},
    {"beta_one", 9, 10, 11, 1, false, false, false, false, false, 2.0, 1.0, false},
    {"vector", 1, 1, 300, 1, false, false, false, false, true, 1.0, 0.0, false},
    {"k_one", 20, 30, 1, 1, false, false, false, false, false, 1.0, 0.0, false},
    {"k_zero_bias", 4, 5, 0, 1, false, false, false, false, true, 1.0, 0.5, false},
    {"large", 200, 190, 210, 1, false, false, false, false, true, 1.0, 0.0, false},
    {"batch", 12, 14, 16, 5, false, false, false, false, false, 1.0, 0.0, false},
    {"batch_many_trans", 8, 9, 10, 19, true, true, false, false, true, 1.0, 0.5, false},
    {"batch_shared_b", 16, 24, 20, 6, false, true, false, true, true, 1.0, 0.0, false},
    {"batch_shared_a", 16, 24, 20, 3, true, false, true, false, false, 1.0, 0.0, false},
    {"batch_large", 96, 100, 110, 2, false, false, false, false, false, 1.0, 0.0, false},
    {"wide_c", 33, 45, 70, 1, false, true, false, false, true, 1.0, 0.0, true},
    {"wide_c_batch_beta", 10, 12, 14, 4, true, false, false, true, false, 1.0, 1.0, true},
};

// The walk of fp32 products on the levels that run them on their tile (isa::F32Gemm::matmuls:
// AVX-512; products of 32 columns and 32^3 multiply-adds or more): threads split by rows (one
// strip of columns); B packed where a thread's rows of A outgrow 1 MiB, then blocks of rows (48 at
// k = 5000) with depth blocks of 128 and a strip of 12 columns, or threads split by columns (one
// panel of rows) and B (17 MB) packed 16 MiB at a time: two strips, then one. bf16 on its tile:
// a transposed A packed in blocks with tails, k past 2048 taken in blocks of 1024 (the last one
// partial), an odd k's last pair, and tall products split by blocks of 256 rows (from 4 blocks a
// thread), the last one partial; A^T B with B the narrower formed as (B^T A)^T, alone and batched
// (per-product threads) with bias, alpha and beta; A^T B over a k of 2048 or more in blocks of 512
// (the last one partial, an odd k's last pair), grouped into 8 partial sums, alone and batched. Skipped elsewhere (Eigen), which keeps them off
// the emulated AVX2 CPU.
const Case kTileCases[] = {
    {"alpha_beta_bias", 40, 48, 50, 1, true, false, false, false, true, 0.5, 0.75, false},
    {"tall_rows_split", 300, 40, 100, 1, false, true, false, false, true, 0.5, 0.0, false},
    {"deep_row_blocks", 100, 60, 5000, 1, true, false, false, false, false, 1.0, 1.0, false},
    {"deep_row_blocks_trans_b", 100, 60, 5000, 1, false, true, false, false, true, 1.0, 0.0, false},
    {"deep_columns_split", 8, 130, 33000, 1, false, true, false, false, true, 1.0, 0.0, false},
    {"deep_odd_k_trans_a", 40, 50, 4097, 1, true, false, false, false, true, 1.0, 0.5, false},
    {"tall_row_blocks", 3100, 40, 64, 1, false, true, false, false, true, 0.5, 0.5, false},
    {"tall_row_blocks_trans_a", 3100, 33, 70, 1, true, false, false, false, false, 1.0, 0.0, false},
    {"trans_a_narrow_b", 90, 17, 2049, 1, true, false, false, false, true, 1.0, 0.0, false},
    {"trans_a_narrow_b_batch", 70, 33, 300, 3, true, false, false, true, true, 0.5, 0.5, false},
    {"k_blocks_groups", 70, 90, 9000, 1, true, false, false, false, true, 0.5, 0.5, false},
    {"k_blocks_batch", 24, 40, 2600, 3, true, false, false, false, true, 1.0, 0.0, false},
};

using demi_test::Level;
class GemmParity : public demi_test::IsaFixture<std::tuple<Level, DType>> {};

TEST_P(GemmParity, MatchesFp64Reference) {
  for (const Case& c : kCases) run_case(c, std::get<1>(GetParam()));
}

TEST_P(GemmParity, TileWalkMatchesFp64Reference) {
  if (!cpu::isa::active().gemm.matmuls) GTEST_SKIP() << cpu::isa::active().name << " runs fp32 products on Eigen's GEMM";
  if (std::get<1>(GetParam()) == DType::F64) GTEST_SKIP() << "fp64 products run on Eigen's GEMM";
  for (const Case& c : kTileCases) run_case(c, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(IsaDtypes, GemmParity,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

// fp32 products within the rounding bound of any order of summation, element by element:
// |C - A B| <= k u sum_k |A B| (u = 2^-24, plus one rounding of alpha A into the packed panel).
// The parity tests' relative tolerance (1e-5, ~170 units in the last place) would let a term lost
// or counted twice in a long sum through; this would not.
TEST_P(GemmParity, Fp32SumsStayWithinTheRoundingBound) {
  if (std::get<1>(GetParam()) != DType::F32) GTEST_SKIP() << "the bound is fp32's";
  struct Shape {
    int64_t m, n, k;
    bool ta, tb;
    double alpha;
  };
  for (const Shape& s : {Shape{12, 12, 20, false, true, 1.0}, Shape{64, 64, 64, false, false, 0.75},
                         Shape{300, 40, 100, true, true, 1.0}, Shape{40, 60, 1500, false, true, 1.0}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k << " ta=" << s.ta << " tb=" << s.tb);
    std::mt19937 rng(99);
    HostTensor a(DType::F32, {s.m * s.k}), b(DType::F32, {s.k * s.n}), c(DType::F32, {s.m * s.n});
    a.fill_random(rng);
    b.fill_random(rng);
    GemmArgs args;
    args.a = a.ref(), args.b = b.ref(), args.c = c.ref();
    args.m = s.m, args.n = s.n, args.k = s.k, args.alpha = s.alpha;
    args.trans_a = s.ta ? Transpose::Yes : Transpose::No;
    args.trans_b = s.tb ? Transpose::Yes : Transpose::No;
    kernels_for(Device::cpu()).gemm(args);
    const double u = std::ldexp(1.0, -24);
    int64_t bad = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          const double term = a.get(s.ta ? p * s.m + i : i * s.k + p) * b.get(s.tb ? j * s.k + p : p * s.n + j);
          sum += term, magnitude += std::abs(term);
        }
        const double err = std::abs(c.get(i * s.n + j) - s.alpha * sum);
        if (err > (s.k + 2) * u * std::abs(s.alpha) * magnitude && bad++ < 5) {
          ADD_FAILURE() << "C[" << i << "][" << j << "] = " << c.get(i * s.n + j) << ", want " << s.alpha * sum
                        << ": error " << err << " over the bound " << (s.k + 2) * u * std::abs(s.alpha) * magnitude;
        }
      }
    }
  }
}

// Small helper for the exact tests: C = A @ B with 1-row A and 1-column B, beta * C_old added.
double dot_half(DType dtype, const std::vector<double>& a, const std::vector<double>& b, double c_old = 0,
                double beta = 0) {
  const int64_t k = static_cast<int64_t>(a.size());
  HostTensor ab(dtype, {1, k}), bb(dtype, {k, 1}), cb(dtype, {1, 1});
  for (int64_t i = 0; i < k; ++i) {
    ab.set(i, a[i]);
    bb.set(i, b[i]);
    EXPECT_EQ(ab.get(i), a[i]) << "test input " << a[i] << " is not exact in " << dtype;
    EXPECT_EQ(bb.get(i), b[i]) << "test input " << b[i] << " is not exact in " << dtype;
  }
  cb.set(0, c_old);
  GemmArgs args;
  args.a = ab.ref(), args.b = bb.ref(), args.c = cb.ref();
  args.m = 1, args.n = 1, args.k = k, args.beta = beta;
  kernels_for(Device::cpu()).gemm(args);
  return cb.get(0);
}

class GemmHalf : public demi_test::IsaFixture<Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, GemmHalf, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

TEST_P(GemmHalf, AccumulatesInFp32) {
  // 1 + 8 * 2^-11: added one by one in fp16 each 2^-11 is a tie that rounds back to 1; in fp32
  // the sum is 1 + 2^-8, exact in fp16.
  std::vector<double> a(9, std::ldexp(1.0, -11)), b(9, 1.0);
  a[0] = 1.0;
  EXPECT_EQ(dot_half(DType::F16, a, b), 1.0 + std::ldexp(1.0, -8));
  // bf16 has 3 fewer mantissa bits: the same with 2^-8 steps.
  std::vector<double> a_bf(9, std::ldexp(1.0, -8));
  a_bf[0] = 1.0;
  EXPECT_EQ(dot_half(DType::BF16, a_bf, b), 1.0 + std::ldexp(1.0, -5));
  // A partial sum of 80000 overflows fp16 but not fp32: the final 40000 must survive.
  EXPECT_EQ(dot_half(DType::F16, {200, 200, -200}, {200, 200, 200}), 40000.0);
}

TEST_P(GemmHalf, RoundsOnceWithBeta) {
  // A @ B = 2^-11 + 2^-22. Rounded once with beta * C = 1: 1 + 2^-11 + 2^-22 (exact in fp32) is
  // just above the tie, so 1 + 2^-10. Rounding A @ B to fp16 first gives 2^-11 (a tie to even),
  // then the tie 1 + 2^-11 rounds to even: 1.
  const double got = dot_half(DType::F16, {std::ldexp(1.0, -11), std::ldexp(1.0, -22)}, {1.0, 1.0}, 1.0, 1.0);
  EXPECT_EQ(got, 1.0 + std::ldexp(1.0, -10));
}

TEST_P(GemmHalf, OverflowBecomesInf) {
  EXPECT_EQ(dot_half(DType::F16, {256}, {256}), INFINITY);  // 65536 > 65504
  EXPECT_EQ(dot_half(DType::F16, {-256}, {256}), -INFINITY);
  EXPECT_EQ(dot_half(DType::F16, {255}, {256}), 65280.0);  // the largest product below the limit
  // bf16 has fp32's range: no overflow here.
  EXPECT_EQ(dot_half(DType::BF16, {256}, {256}), 65536.0);
}

TEST(Gemm, BetaZeroIgnoresNanInC) {
  HostTensor a(DType::F32, {2, 2}), b(DType::F32, {2, 2}), c(DType::F32, {2, 2});
  for (int i = 0; i < 4; ++i) a.set(i, 1), b.set(i, 1), c.set(i, NAN);
  GemmArgs args;
  args.a = a.ref(), args.b = b.ref(), args.c = c.ref();
  args.m = args.n = args.k = 2;
  kernels_for(Device::cpu()).gemm(args);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.get(i), 2.0);
}

TEST(Gemm, RejectsBadArguments) {
  Kernels& k = kernels_for(Device::cpu());
  HostTensor a(DType::F32, {4, 4}), b(DType::F16, {4, 4}), c(DType::F32, {4, 4}), small(DType::F32, {3});
  GemmArgs args;
  args.a = a.ref(), args.b = b.ref(), args.c = c.ref();
  args.m = args.n = args.k = 4;
  EXPECT_THROW(k.gemm(args), Error);  // A and B dtypes differ
  HostTensor b32(DType::F32, {4, 4});
  args.b = b32.ref();
  args.c = small.ref();
  EXPECT_THROW(k.gemm(args), Error);  // C too small
  args.c = c.ref();
  args.bias = small.ref();
  EXPECT_THROW(k.gemm(args), Error);  // bias is not [n]
}

}  // namespace
}  // namespace demi::backend

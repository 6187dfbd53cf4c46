// Pins backends/cuda/gemm.cu: CudaKernels::gemm on cuda:0 against the CPU backend on the same inputs,
// case by case (every A/B and C dtype pair, transposes, odd and empty shapes, batches with shared
// matrices, bias fused or not, beta, TF32), plus plan-cache reuse and the error paths.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

constexpr int64_t kAuto = -1;  // a dense batch stride (the matrix's size)
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kGap = 7.0;  // what C holds between batched matrices: gemm must leave it alone

struct GemmCase {
  DType ab = DType::F32, c = DType::F32;
  bool bias = false;
  DType bias_dtype = DType::F32;
  Transpose ta = Transpose::No, tb = Transpose::No;
  int64_t m = 7, n = 33, k = 130, batch = 1;
  int64_t stride_a = kAuto, stride_b = kAuto, stride_c = kAuto;
  double alpha = 1.0, beta = 0.0;
  int64_t offset = 0;  // elements each of A, B, C starts past its allocation: unaligned pointers
  bool tf32 = false;

  std::string name() const {
    std::ostringstream s;
    s << "gemm A/B " << ab << " C " << c << (ta == Transpose::Yes ? " A^T" : "") << (tb == Transpose::Yes ? " B^T" : "")
      << " m=" << m << " n=" << n << " k=" << k << " batch=" << batch;
    if (batch > 1) s << " strides " << sa() << "," << sb() << "," << sc();
    if (bias) s << " bias " << bias_dtype;
    s << " alpha=" << alpha << " beta=" << beta;
    if (offset) s << " offset " << offset;
    if (tf32) s << " tf32";
    return s.str();
  }
  int64_t sa() const { return stride_a == kAuto ? m * k : stride_a; }
  int64_t sb() const { return stride_b == kAuto ? k * n : stride_b; }
  int64_t sc() const { return stride_c == kAuto ? m * n : stride_c; }
};

int64_t span(int64_t batch, int64_t stride, int64_t matrix) {
  return (batch == 1 || stride == 0) ? matrix : (batch - 1) * stride + matrix;
}

// Error bound on element i of C: the compute's accumulation error relative to the magnitude mag[i] =
// |alpha| sum |a||b| + |beta c| + |bias| (cancellation makes the result itself a poor scale), plus one
// unit of the output's rounding, epsilon(C) |want|: device and CPU each round once, from slightly
// different sums; plus, for fp16, its subnormal step 2^-24. Tolerance{eps, acc mag[i] + subnormal}.
std::vector<Tolerance> gemm_tolerance(const GemmCase& c, const std::vector<double>& mag) {
  // fp32 accumulation of O(100) terms in another order, ~sqrt(k) 2^-24: accumulated(F32).rtol = 1e-5
  // (accumulated(F64).rtol = 1e-12 when either side is F64). TF32 keeps 10 mantissa bits of each
  // operand; truncated (not rounded) in the worst case, one product errs by 2 * 2^-10 relative,
  // which a k = 1 product shows undiluted.
  double acc = accumulated(DType::F32, c.k).rtol;
  if (c.ab == DType::F64 || c.c == DType::F64) acc = accumulated(DType::F64, c.k).rtol;
  else if (c.ab == DType::F32 && c.tf32) acc = 0x1p-9;
  const double subnormal = c.c == DType::F16 ? 0x1p-24 : 0.0;
  std::vector<Tolerance> tol;
  for (const double m : mag) tol.push_back({epsilon(c.c), acc * m + subnormal});
  return tol;
}

// Host operands, each already rounded to its dtype, and the bytes both backends start from.
struct Operands {
  std::vector<double> a, b, c, bias;
  std::vector<uint8_t> a_bytes, b_bytes, c_bytes, bias_bytes;
};

Operands make_operands(const GemmCase& g, unsigned seed) {
  Operands o;
  const int64_t mn = g.m * g.n;
  o.a = uniform(static_cast<size_t>(span(g.batch, g.sa(), g.m * g.k) + g.offset), -1.0, 1.0, seed);
  o.b = uniform(static_cast<size_t>(span(g.batch, g.sb(), g.k * g.n) + g.offset), -1.0, 1.0, seed + 1);
  // C: random where beta reads it, NaN where it must not (beta = 0); kGap between the matrices.
  o.c.assign(static_cast<size_t>(span(g.batch, g.sc(), mn) + g.offset), kGap);
  const std::vector<double> initial = uniform(o.c.size(), -1.0, 1.0, seed + 2);
  for (int64_t bt = 0; bt < g.batch; ++bt)
    for (int64_t r = 0; r < mn; ++r) {
      const size_t i = static_cast<size_t>(g.offset + bt * g.sc() + r);
      o.c[i] = g.beta != 0.0 ? initial[i] : kNaN;
    }
  if (g.bias) o.bias = uniform(static_cast<size_t>(g.n), -1.0, 1.0, seed + 3);
  o.a_bytes = encode(o.a, g.ab);
  o.b_bytes = encode(o.b, g.ab);
  o.c_bytes = encode(o.c, g.c);
  o.bias_bytes = encode(o.bias, g.bias_dtype);
  o.a = decode(o.a_bytes, g.ab);  // the stored values, for the magnitudes
  o.b = decode(o.b_bytes, g.ab);
  o.c = decode(o.c_bytes, g.c);
  o.bias = decode(o.bias_bytes, g.bias_dtype);
  return o;
}

GemmArgs make_args(const GemmCase& g, void* a, void* b, void* c, void* bias, size_t a_n, size_t b_n, size_t c_n) {
  GemmArgs args;
  const auto at = [&](void* p, DType dtype) { return p ? static_cast<uint8_t*>(p) + g.offset * dtype_size(dtype) : p; };
  args.a = TensorRef{at(a, g.ab), {static_cast<int64_t>(a_n) - g.offset}, g.ab};
  args.b = TensorRef{at(b, g.ab), {static_cast<int64_t>(b_n) - g.offset}, g.ab};
  args.c = TensorRef{at(c, g.c), {static_cast<int64_t>(c_n) - g.offset}, g.c};
  if (g.bias) args.bias = TensorRef{bias, {g.n}, g.bias_dtype};
  args.trans_a = g.ta, args.trans_b = g.tb;
  args.m = g.m, args.n = g.n, args.k = g.k, args.batch = g.batch;
  args.stride_a = g.sa(), args.stride_b = g.sb(), args.stride_c = g.sc();
  args.alpha = g.alpha, args.beta = g.beta;
  return args;
}

// Restores the TF32 switch on scope exit, even when an assertion fails.
class Tf32Guard {
 public:
  explicit Tf32Guard(bool allow) : previous_(allow_tf32()) { set_allow_tf32(allow); }
  ~Tf32Guard() { set_allow_tf32(previous_); }
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;

 private:
  bool previous_;
};

// C's bytes after the case runs on cuda:0.
std::vector<uint8_t> run_gpu(const GemmCase& g, const Operands& o) {
  const Tf32Guard tf32(g.tf32);
  const Buffer a(gpu(), o.a_bytes), b(gpu(), o.b_bytes), c(gpu(), o.c_bytes);
  const Buffer bias(gpu(), g.bias ? o.bias_bytes : std::vector<uint8_t>(8));
  gpu().gemm(make_args(g, a.data(), b.data(), c.data(), g.bias ? bias.data() : nullptr, o.a.size(), o.b.size(),
                       o.c.size()));
  return c.read();
}

std::vector<uint8_t> run_cpu(const GemmCase& g, const Operands& o) {
  std::vector<uint8_t> a = o.a_bytes, b = o.b_bytes, c = o.c_bytes, bias = o.bias_bytes;
  cpu().gemm(make_args(g, a.data(), b.data(), c.data(), g.bias ? bias.data() : nullptr, o.a.size(), o.b.size(),
                       o.c.size()));
  return c;
}

// |alpha| sum_p |op(A)[i, p]| |op(B)[p, j]| + |beta C[i, j]| + |bias[j]| for every element of C's buffer
// (0 in the gaps and before the offset).
std::vector<double> magnitudes(const GemmCase& g, const Operands& o) {
  std::vector<double> mag(o.c.size(), 0.0);
  const bool ta = g.ta == Transpose::Yes, tb = g.tb == Transpose::Yes;
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    const double* a = o.a.data() + g.offset + (g.batch > 1 ? bt * g.sa() : 0);
    const double* b = o.b.data() + g.offset + (g.batch > 1 ? bt * g.sb() : 0);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double av = ta ? a[p * g.m + i] : a[i * g.k + p];
          const double bv = tb ? b[j * g.k + p] : b[p * g.n + j];
          sum += std::fabs(av * bv);
        }
        const size_t at = static_cast<size_t>(g.offset + bt * g.sc() + i * g.n + j);
        mag[at] = std::fabs(g.alpha) * sum + (g.beta != 0.0 ? std::fabs(g.beta * o.c[at]) : 0.0) +
                  (g.bias ? std::fabs(o.bias[static_cast<size_t>(j)]) : 0.0);
      }
  }
  return mag;
}

// Runs the case on both backends from the same bytes and compares all of C's buffer.
void check_case(const GemmCase& g, unsigned seed = 11) {
  SCOPED_TRACE(g.name());
  const Operands o = make_operands(g, seed);
  const std::vector<double> want = decode(run_cpu(g, o), g.c);
  const std::vector<double> got = decode(run_gpu(g, o), g.c);
  for (const double v : want)  // the reference itself never reads the NaN a beta = 0 leaves in C
    ASSERT_FALSE(std::isnan(v)) << g.name() << ": the CPU reference produced NaN";
  expect_close(got, want, gemm_tolerance(g, magnitudes(g, o)), g.name());
}

const std::vector<std::pair<Transpose, Transpose>> kTransposes = {
    {Transpose::No, Transpose::No}, {Transpose::Yes, Transpose::No},
    {Transpose::No, Transpose::Yes}, {Transpose::Yes, Transpose::Yes}};

// --- Parity with the CPU -------------------------------------------------------------------------

TEST(CudaGemm, EveryDTypePairAndTransposeMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // A/B x C covers cuBLASLt's own combinations (fp16/bf16 -> same or fp32, fp32, fp64) and those that
  // go through conversions (fp32 -> half, fp16 -> bf16, anything with fp64). The bias is absent, of
  // C's dtype (the fused epilogue for fp32 C) or of another (a separate pass); a half C goes through fp32.
  unsigned seed = 100;
  for (const DType ab : kFloatDTypes)
    for (const DType c : kFloatDTypes)
      for (const auto& [ta, tb] : kTransposes)
        for (int bias = 0; bias < 3; ++bias) {
          GemmCase g;
          g.ab = ab, g.c = c, g.ta = ta, g.tb = tb;
          g.bias = bias > 0;
          g.bias_dtype = bias == 1 ? c : (c == DType::F32 ? DType::BF16 : DType::F32);
          g.alpha = bias == 2 ? -0.75 : 1.0;
          g.beta = (bias + (ta == Transpose::Yes)) % 2 ? 0.5 : 0.0;
          check_case(g, ++seed);
        }
}

TEST(CudaGemm, OddShapesMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {1, 7, 33}, {7, 1, 130}, {33, 130, 1},
                                                      {130, 33, 7}, {7, 130, 33}, {33, 7, 130}, {130, 130, 130}};
  unsigned seed = 500;
  for (const auto& [ab, c] : {std::pair{DType::F32, DType::F32}, std::pair{DType::BF16, DType::BF16},
                              std::pair{DType::F16, DType::F32}})
    for (const auto& [m, n, k] : shapes)
      for (const auto& [ta, tb] : kTransposes)
        for (const bool bias : {false, true}) {
          GemmCase g;
          g.ab = ab, g.c = c, g.ta = ta, g.tb = tb, g.bias = bias, g.bias_dtype = c;
          g.m = m, g.n = n, g.k = k;
          g.beta = bias ? 0.0 : -1.25;
          g.alpha = bias ? 2.0 : 1.0;
          check_case(g, ++seed);
        }
}

TEST(CudaGemm, UnalignedPointersMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // One element past an allocation: 2-byte aligned half operands, 4-byte fp32, 8-byte fp64. The plan
  // is keyed on alignment, so an aligned call of the same shape must not reuse a vectorised algorithm.
  unsigned seed = 900;
  for (const auto& [ab, c] : {std::pair{DType::F16, DType::F16}, std::pair{DType::BF16, DType::F32},
                              std::pair{DType::F32, DType::F32}, std::pair{DType::F64, DType::F64}})
    for (const int64_t offset : {0, 1, 3, 0})
      for (const bool bias : {false, true}) {
        GemmCase g;
        g.ab = ab, g.c = c, g.bias = bias, g.bias_dtype = c, g.offset = offset;
        g.m = 64, g.n = 40, g.k = 72;
        check_case(g, ++seed);
      }
}

TEST(CudaGemm, BatchedWithDenseGappedAndSharedMatricesMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  struct Strides { int64_t a, b, c; };
  // kAuto: dense; 0: one matrix for the whole batch (a weight); larger than the matrix: gaps, which
  // must stay untouched in C; smaller than the matrix: overlapping inputs, which are only read.
  const std::vector<Strides> strides = {{kAuto, kAuto, kAuto}, {0, kAuto, kAuto}, {kAuto, 0, kAuto},
                                        {0, 0, kAuto},         {300, 5, 290},     {7 * 33 + 3, 0, 7 * 40 + 1}};
  unsigned seed = 1300;
  for (const auto& [ab, c] : {std::pair{DType::F32, DType::F32}, std::pair{DType::F16, DType::F16},
                              std::pair{DType::BF16, DType::F32}, std::pair{DType::F16, DType::BF16},
                              std::pair{DType::F64, DType::F64}})
    for (const Strides& s : strides)
      for (const auto& [ta, tb] : {std::pair{Transpose::No, Transpose::No}, std::pair{Transpose::Yes, Transpose::Yes}})
        for (const bool bias : {false, true}) {
          GemmCase g;
          g.ab = ab, g.c = c, g.ta = ta, g.tb = tb, g.bias = bias, g.bias_dtype = c;
          g.m = 7, g.n = 40, g.k = 33, g.batch = 3;
          g.stride_a = s.a, g.stride_b = s.b, g.stride_c = s.c;
          g.beta = bias ? 0.25 : 0.0;
          check_case(g, ++seed);
        }
}

TEST(CudaGemm, KZeroIsBetaCPlusBias) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  unsigned seed = 1700;
  for (const DType c : kFloatDTypes)
    for (const double beta : {0.0, 1.0, -0.5})
      for (const bool bias : {false, true})
        for (const int64_t batch : {1, 2}) {
          GemmCase g;
          g.ab = DType::F32, g.c = c, g.bias = bias, g.bias_dtype = DType::F32;
          g.m = 5, g.n = 9, g.k = 0, g.batch = batch, g.stride_c = batch > 1 ? 50 : kAuto;
          g.beta = beta;
          check_case(g, ++seed);
        }
  // A and B may be undefined when they hold no element.
  const Buffer c(gpu(), encode(std::vector<double>(6, kNaN), DType::F32));
  GemmArgs args;
  args.a = TensorRef{nullptr, {2, 0}, DType::F16};
  args.b = TensorRef{nullptr, {0, 3}, DType::F16};
  args.c = c.ref({2, 3}, DType::F32);
  args.m = 2, args.n = 3, args.k = 0;
  gpu().gemm(args);
  for (const double v : decode(c.read(), DType::F32)) EXPECT_EQ(v, 0.0);
}

TEST(CudaGemm, EmptyOutputWritesNothing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<uint8_t> sentinel = encode(std::vector<double>(16, kGap), DType::F32);
  const Buffer a(gpu(), sentinel), b(gpu(), sentinel), c(gpu(), sentinel), bias(gpu(), sentinel);
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{0, 4}, std::pair<int64_t, int64_t>{4, 0}}) {
    GemmArgs args;
    args.a = a.ref({m, 3}, DType::F32);
    args.b = b.ref({3, n}, DType::F32);
    args.c = c.ref({m, n}, DType::F32);
    args.bias = bias.ref({n}, DType::F32);
    args.m = m, args.n = n, args.k = 3, args.batch = 2, args.stride_c = m * n;
    gpu().gemm(args);
    EXPECT_TRUE(c.read() == sentinel) << "m=" << m << " n=" << n << ": an empty product wrote into C";
  }
}

TEST(CudaGemm, HalfOutputOverflowsAndUnderflowsLikeCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // 300 * 300 = 90000 > 65504 is inf in fp16 (but finite in bf16 and fp32); 2^-13 * 2^-13 = 2^-26 is
  // below fp16's smallest subnormal and rounds to 0. Accumulated in fp32, rounded once, on both sides.
  for (const DType c : {DType::F16, DType::BF16, DType::F32}) {
    const std::vector<double> a = {300.0, 0x1p-13}, b = {300.0, 0x1p-13};
    std::vector<uint8_t> a_bytes = encode(a, DType::F16), b_bytes = encode(b, DType::F16);
    std::vector<uint8_t> c_bytes = encode({0.0, 0.0, 0.0, 0.0}, c);
    const Buffer ga(gpu(), a_bytes), gb(gpu(), b_bytes), gc(gpu(), c_bytes);
    GemmArgs args;
    args.m = 2, args.n = 2, args.k = 1;
    args.a = ga.ref({2, 1}, DType::F16), args.b = gb.ref({1, 2}, DType::F16), args.c = gc.ref({2, 2}, c);
    gpu().gemm(args);
    args.a.data = a_bytes.data(), args.b.data = b_bytes.data(), args.c.data = c_bytes.data();
    cpu().gemm(args);
    expect_same(gc.read(), c_bytes, c, std::string("fp16 products into ") + dtype_name(c));
    const std::vector<double> got = decode(c_bytes, c);
    EXPECT_EQ(std::isinf(got[0]), c == DType::F16) << got[0];
    EXPECT_EQ(got[3] == 0.0, c == DType::F16) << got[3];
  }
}

TEST(CudaGemm, Tf32IsUsedOnlyWhenAllowed) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // With TF32 allowed the fp32 result is within TF32's error of the CPU's and differs from the exact
  // fp32 one (with 130-term sums of random values some element always does); the switch is read per
  // call, so the plans of both settings coexist.
  for (const auto& [ta, tb] : kTransposes) {
    GemmCase g;
    g.ta = ta, g.tb = tb, g.m = 33, g.n = 65, g.k = 130, g.bias = true;
    const Operands o = make_operands(g, 2024);
    GemmCase t = g;
    t.tf32 = true;
    const std::vector<uint8_t> exact = run_gpu(g, o), fast = run_gpu(t, o), exact_again = run_gpu(g, o);
    const std::vector<double> want = decode(run_cpu(g, o), DType::F32), mag = magnitudes(g, o);
    expect_close(decode(exact, DType::F32), want, gemm_tolerance(g, mag), g.name());
    expect_close(decode(fast, DType::F32), want, gemm_tolerance(t, mag), t.name());
    EXPECT_TRUE(fast != exact) << t.name() << ": identical to the fp32 result, so TF32 was not used";
    EXPECT_TRUE(exact_again == exact) << g.name() << ": TF32 leaked into a call made with it off";
  }
  // Half inputs and fp64 ignore the switch.
  for (const DType ab : {DType::BF16, DType::F64}) {
    GemmCase g;
    g.ab = ab, g.c = ab;
    const Operands o = make_operands(g, 77);
    GemmCase t = g;
    t.tf32 = true;
    EXPECT_TRUE(run_gpu(t, o) == run_gpu(g, o)) << g.name() << ": the TF32 switch changed a non-fp32 product";
  }
}

TEST(CudaGemm, RepeatedCallsReusePlansBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // The second call of a shape finds its plan (no descriptor or heuristic): same algorithm, same bits,
  // also from other buffers of the same alignment and after other shapes have been planned.
  for (const auto& [ab, c] : {std::pair{DType::BF16, DType::BF16}, std::pair{DType::F32, DType::F32},
                              std::pair{DType::F16, DType::F32}}) {
    GemmCase g;
    g.ab = ab, g.c = c, g.m = 96, g.n = 80, g.k = 200, g.bias = true, g.bias_dtype = c, g.tb = Transpose::Yes;
    const Operands o = make_operands(g, 5);
    const std::vector<uint8_t> first = run_gpu(g, o);
    EXPECT_TRUE(run_gpu(g, o) == first) << g.name() << ": a repeated call changed the result";
    GemmCase other = g;
    other.m = 17;
    check_case(other);
    EXPECT_TRUE(run_gpu(g, o) == first) << g.name() << ": changed after another shape";
    // Same buffers, called twice in a row: the cached descriptor's bias pointer is refreshed per call.
    const Buffer a(gpu(), o.a_bytes), b(gpu(), o.b_bytes), cb(gpu(), o.c_bytes), bias(gpu(), o.bias_bytes);
    const GemmArgs args = make_args(g, a.data(), b.data(), cb.data(), bias.data(), o.a.size(), o.b.size(), o.c.size());
    gpu().gemm(args);
    gpu().gemm(args);
    EXPECT_TRUE(cb.read() == first) << g.name() << ": changed when called twice into the same C";
  }
}

// --- Errors --------------------------------------------------------------------------------------

TEST(CudaGemm, BadArgumentsThrowLikeCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Buffer buffer(gpu(), 4096);
  std::vector<uint8_t> host(4096);
  auto base = [](void* p) {
    GemmArgs g;
    g.a = TensorRef{p, {4, 3}, DType::F32};
    g.b = TensorRef{p, {3, 5}, DType::F32};
    g.c = TensorRef{p, {4, 5}, DType::F32};
    g.m = 4, g.n = 5, g.k = 3;
    return g;
  };
  struct Bad {
    const char* what;  // a fragment of the message
    void (*edit)(GemmArgs&);
  };
  const std::vector<Bad> cases = {
      {"share a dtype", [](GemmArgs& g) { g.b.dtype = DType::F16; }},
      {"must be floating", [](GemmArgs& g) { g.a.dtype = g.b.dtype = DType::I64; }},
      {"must be floating", [](GemmArgs& g) { g.c.dtype = DType::U8; }},
      {"batch >= 1", [](GemmArgs& g) { g.batch = 0; }},
      {"m, n, k >= 0", [](GemmArgs& g) { g.k = -1; }},
      {"strides must be >= 0", [](GemmArgs& g) { g.stride_a = -1; }},
      {"C's stride", [](GemmArgs& g) { g.batch = 2, g.stride_c = 19, g.c.shape = {2, 4, 5}; }},
      {"holds", [](GemmArgs& g) { g.c.shape = {4, 4}; }},
      {"holds", [](GemmArgs& g) { g.batch = 2, g.stride_a = 12, g.stride_c = 20, g.c.shape = {2, 4, 5}; }},
      {"undefined", [](GemmArgs& g) { g.b.data = nullptr; }},
      {"bias must have", [](GemmArgs& g) { g.bias = TensorRef{g.a.data, {4}, DType::F32}; }},
      {"bias must be floating", [](GemmArgs& g) { g.bias = TensorRef{g.a.data, {5}, DType::I64}; }},
  };
  for (const Bad& bad : cases) {
    for (Kernels* k : {&gpu(), &cpu()}) {
      GemmArgs g = base(k == &gpu() ? buffer.data() : static_cast<void*>(host.data()));
      bad.edit(g);
      try {
        k->gemm(g);
        ADD_FAILURE() << bad.what << ": " << (k == &gpu() ? "CUDA" : "CPU") << " gemm did not throw";
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("gemm: "), std::string::npos) << message;
        EXPECT_NE(message.find(bad.what), std::string::npos) << message;
      }
    }
  }
}

}  // namespace
}  // namespace demi::backend

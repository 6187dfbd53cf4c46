// Pins backends/cuda/reduce.cu: sum, mean, max and min on cuda:0 against the CPU backend for every
// reduced-dims pattern of [2, 3, 5, 7], the batch-norm / bias-gradient patterns, long rows, columns
// and full reductions on each code path (warp, block, split chunks), every floating dtype pair,
// NaN / inf for max, empty reductions, determinism and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

struct ReduceCase {
  std::string name;
  Shape x, y;
};

struct DTypePair {
  DType x, y;
};

const std::vector<DTypePair> kSameDTypes = {
    {DType::F32, DType::F32}, {DType::F64, DType::F64}, {DType::F16, DType::F16}, {DType::BF16, DType::BF16}};
// y wider than x (autocast's fp32 sums of half tensors) and narrower (one rounding from double).
const std::vector<DTypePair> kMixedDTypes = {
    {DType::F16, DType::F32}, {DType::BF16, DType::F32}, {DType::F32, DType::F64}, {DType::F64, DType::F16}};

const ReduceKind kKinds[] = {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min};

std::string kind_name(ReduceKind k) {
  return k == ReduceKind::Sum ? "sum" : k == ReduceKind::Mean ? "mean" : k == ReduceKind::Max ? "max" : "min";
}

std::vector<ReduceCase> all_patterns_of(const Shape& x) {
  std::vector<ReduceCase> cases;
  for (unsigned mask = 0; mask < (1u << x.size()); ++mask) {
    Shape y = x;
    std::ostringstream name;
    name << "reduce dims {";
    for (size_t d = 0; d < x.size(); ++d) {
      if (mask & (1u << d)) {
        y[d] = 1;
        name << " " << d;
      }
    }
    name << " } of " << x;
    cases.push_back({name.str(), x, y});
  }
  return cases;
}

// The kernel's output read back as doubles.
std::vector<double> run_gpu(ReduceKind kind, const std::vector<uint8_t>& x_bytes, const Shape& xs, DType xt,
                            const Shape& ys, DType yt) {
  const Buffer x(gpu(), x_bytes);
  Buffer y(gpu(), static_cast<size_t>(shape_numel(ys)) * dtype_size(yt));
  gpu().reduce(kind, x.ref(xs, xt), y.ref(ys, yt));
  return decode(y.read(), yt);
}

std::vector<double> run_cpu(ReduceKind kind, const std::vector<uint8_t>& x_bytes, const Shape& xs, DType xt,
                            const Shape& ys, DType yt) {
  std::vector<uint8_t> y(static_cast<size_t>(shape_numel(ys)) * dtype_size(yt));
  const TensorRef x{const_cast<uint8_t*>(x_bytes.data()), xs, xt};
  cpu().reduce(kind, x, TensorRef{y.data(), ys, yt});
  return decode(y, yt);
}

// Both backends accumulate in double, in different orders: the two doubles differ by at most about
// (longest add chain ~ 600) * 2^-53 * sum|x|, so a double y may differ by 1e-13 * sum|x| (in a mean,
// of mean|x|); other y dtypes round that double once, within device_math(y). Max is exact on both
// (abs_scale 0). Element i: Tolerance{r, r + 1e-13 abs_scale[i]}, r = device_math(y).rtol.
std::vector<Tolerance> reduction_tolerance(DType y_dtype, const std::vector<double>& abs_scale) {
  const double r = device_math(y_dtype).rtol;
  std::vector<Tolerance> tol;
  for (const double s : abs_scale) tol.push_back({r, r + 1e-13 * s});
  return tol;
}

void check_case(const ReduceCase& c, const std::vector<DTypePair>& pairs, unsigned seed) {
  const size_t n = static_cast<size_t>(shape_numel(c.x));
  const std::vector<double> values = uniform(n, -2.0, 2.0, seed);
  for (const DTypePair& dt : pairs) {
    const std::vector<uint8_t> x_bytes = encode(values, dt.x);
    std::vector<double> magnitudes = decode(x_bytes, dt.x);
    for (double& v : magnitudes) v = std::fabs(v);
    const std::vector<uint8_t> abs_bytes = encode(magnitudes, DType::F64);
    for (const ReduceKind kind : kKinds) {
      std::ostringstream name;
      name << kind_name(kind) << " " << c.name << " -> " << c.y << ", " << dt.x << " -> " << dt.y;
      SCOPED_TRACE(name.str());
      const std::vector<double> want = run_cpu(kind, x_bytes, c.x, dt.x, c.y, dt.y);
      const std::vector<double> got = run_gpu(kind, x_bytes, c.x, dt.x, c.y, dt.y);
      const std::vector<double> abs_scale =
          kind == ReduceKind::Max || kind == ReduceKind::Min ? std::vector<double>(want.size(), 0.0)
                                  : run_cpu(kind, abs_bytes, c.x, DType::F64, c.y, DType::F64);
      expect_close(got, want, reduction_tolerance(dt.y, abs_scale), name.str());
    }
  }
}

TEST(CudaReduce, EveryPatternOf2x3x5x7) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  unsigned seed = 1;
  for (const ReduceCase& c : all_patterns_of({2, 3, 5, 7})) {
    check_case(c, kSameDTypes, seed);
    check_case(c, kMixedDTypes, seed++);
  }
}

TEST(CudaReduce, LayoutsAndSizesOfEveryCodePath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<ReduceCase> cases = {
      {"batch-norm statistics [N,C,H,W] -> [1,C,1,1]", {8, 16, 9, 11}, {1, 16, 1, 1}},
      {"batch-norm statistics, split into chunks", {32, 64, 32, 32}, {1, 64, 1, 1}},
      {"bias gradient [N,C] -> [1,C], few columns split", {5000, 3}, {1, 3}},
      {"bias gradient [N,C] -> [1,C], many columns", {40, 70001}, {1, 70001}},
      {"middle dim", {2, 50, 600}, {2, 1, 600}},
      {"columns split into chunks", {1000, 300}, {1, 300}},
      {"rows, warp per row", {3001, 100}, {3001, 1}},
      {"rows, block per row", {1500, 3000}, {1500, 1}},
      {"few long rows, split into chunks", {10, 20000}, {10, 1}},
      {"full, 1 element", {1}, {1}},
      {"full, 1000 elements", {1000}, {1}},
      {"full, 100003 elements", {100003}, {1}},
      {"full, 100003 elements into a 0-d y", {100003}, {}},
      {"full, 3-D", {7, 11, 13}, {1, 1, 1}},
      {"0-d", {}, {}},
      {"size-1 dims in x", {3, 1, 4}, {1, 1, 4}},
      {"nothing reduced", {3, 4}, {3, 4}},
      {"kept dim empty", {0, 3}, {0, 1}},
  };
  unsigned seed = 100;
  for (const ReduceCase& c : cases) {
    check_case(c, kSameDTypes, seed);
    check_case(c, kMixedDTypes, seed++);
  }
}

TEST(CudaReduce, EmptyReductionIsZeroSumNaNMeanAndMaxThrows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape xs = {3, 0}, ys = {3, 1};
    const std::vector<uint8_t> none;
    for (const ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean}) {
      const std::vector<double> got = run_gpu(kind, none, xs, dtype, ys, dtype);
      const std::vector<double> want = run_cpu(kind, none, xs, dtype, ys, dtype);
      ASSERT_EQ(got.size(), 3u);
      for (size_t i = 0; i < got.size(); ++i) {
        if (kind == ReduceKind::Sum) EXPECT_EQ(got[i], 0.0);
        else EXPECT_TRUE(std::isnan(got[i])) << got[i];
        EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i]));
      }
    }
    EXPECT_THROW(run_gpu(ReduceKind::Max, none, xs, dtype, ys, dtype), Error);
    EXPECT_THROW(run_gpu(ReduceKind::Min, none, xs, dtype, ys, dtype), Error);
  }
}

TEST(CudaReduce, MaxPropagatesNaNAndKeepsInfinities) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // [4, 6]: row 0 plain, row 1 has a NaN (not first, not last), row 2 has +inf, row 3 is all -inf.
  std::vector<double> values = uniform(24, -3.0, 3.0, 5);
  values[1 * 6 + 3] = nan;
  values[2 * 6 + 0] = inf;
  for (int j = 0; j < 6; ++j) values[3 * 6 + j] = -inf;
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<uint8_t> x = encode(values, dtype);
    const std::vector<double> rows = run_gpu(ReduceKind::Max, x, {4, 6}, dtype, {4, 1}, dtype);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_FALSE(std::isnan(rows[0]));
    EXPECT_TRUE(std::isnan(rows[1])) << rows[1];
    EXPECT_EQ(rows[2], inf);
    EXPECT_EQ(rows[3], -inf);
    expect_close(rows, run_cpu(ReduceKind::Max, x, {4, 6}, dtype, {4, 1}, dtype), device_math(dtype),
                 "max over rows");
    const std::vector<double> columns = run_gpu(ReduceKind::Max, x, {4, 6}, dtype, {1, 6}, dtype);
    EXPECT_TRUE(std::isnan(columns[3])) << columns[3];
    EXPECT_EQ(columns[0], inf);
    expect_close(columns, run_cpu(ReduceKind::Max, x, {4, 6}, dtype, {1, 6}, dtype), device_math(dtype),
                 "max over columns");
    EXPECT_TRUE(std::isnan(run_gpu(ReduceKind::Max, x, {4, 6}, dtype, {}, dtype)[0]));
    const std::vector<double> lows = run_gpu(ReduceKind::Min, x, {4, 6}, dtype, {4, 1}, dtype);
    EXPECT_TRUE(std::isnan(lows[1])) << lows[1];
    EXPECT_EQ(lows[3], -inf);
    expect_close(lows, run_cpu(ReduceKind::Min, x, {4, 6}, dtype, {4, 1}, dtype), device_math(dtype), "min over rows");
    // The sum of a row holding +inf is +inf; with a NaN, NaN.
    const std::vector<double> sums = run_gpu(ReduceKind::Sum, x, {4, 6}, dtype, {4, 1}, dtype);
    EXPECT_TRUE(std::isnan(sums[1]));
    EXPECT_EQ(sums[2], inf);
    EXPECT_EQ(sums[3], -inf);
  }
  // A long run (split into chunks, combined by the second kernel) with one NaN, and with one +inf.
  for (const double special : {nan, inf}) {
    std::vector<double> run = uniform(100003, -1.0, 1.0, 6);
    run[77777] = special;
    const std::vector<double> got = run_gpu(ReduceKind::Max, encode(run, DType::F32), {100003}, DType::F32, {1}, DType::F32);
    if (std::isnan(special)) EXPECT_TRUE(std::isnan(got[0])) << got[0];
    else EXPECT_EQ(got[0], inf);
  }
}

// argmax and argmin over the middle dim of [O, R, I]: the first extreme, NaN the extreme, as the CPU.
TEST(CudaReduce, ArgmaxAndArgminMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Shape> shapes = {{1, 10, 1}, {3, 7, 5}, {64, 10, 1}, {2, 1, 9}, {1, 100003, 1}};
  for (const bool is_min : {false, true}) {
    for (const Shape& shape : shapes) {
      for (const DType dtype : kFloatDTypes) {
        std::ostringstream name;
        name << (is_min ? "argmin " : "argmax ") << shape << " " << dtype;
        SCOPED_TRACE(name.str());
        std::vector<double> values = uniform(static_cast<size_t>(shape_numel(shape)), -2.0, 2.0, 3);
        if (values.size() > 20) {
          values[4] = values[9] = is_min ? -5.0 : 5.0;  // a tie: the first wins
          values[17] = nan;
        }
        const std::vector<uint8_t> x = encode(values, dtype);
        const Shape y_shape = {shape[0], 1, shape[2]};
        const Buffer dx(gpu(), x);
        Buffer dy(gpu(), static_cast<size_t>(shape_numel(y_shape)) * sizeof(int64_t));
        std::vector<int64_t> on_cpu(static_cast<size_t>(shape_numel(y_shape)));
        const TensorRef cx{const_cast<uint8_t*>(x.data()), shape, dtype}, cy{on_cpu.data(), y_shape, DType::I64};
        if (is_min) {
          gpu().argmin(dx.ref(shape, dtype), dy.ref(y_shape, DType::I64));
          cpu().argmin(cx, cy);
        } else {
          gpu().argmax(dx.ref(shape, dtype), dy.ref(y_shape, DType::I64));
          cpu().argmax(cx, cy);
        }
        const std::vector<uint8_t> got = dy.read();
        EXPECT_EQ(std::memcmp(got.data(), on_cpu.data(), got.size()), 0);
      }
    }
  }
}

// permute of every element width, against the CPU's.
TEST(CudaReduce, PermuteMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  struct Case {
    Shape x;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {{{3, 5}, {1, 0}}, {{2, 3, 4, 5}, {0, 3, 2, 1}}, {{7}, {0}}, {{64, 33, 2}, {2, 0, 1}}};
  for (const Case& c : cases) {
    for (const DType dtype : {DType::U8, DType::F16, DType::F32, DType::F64}) {
      SCOPED_TRACE(dtype_name(dtype));
      Shape y_shape;
      for (int64_t d : c.dims) y_shape.push_back(c.x[static_cast<size_t>(d)]);
      std::vector<double> values(static_cast<size_t>(shape_numel(c.x)));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 251);
      const std::vector<uint8_t> x = encode(values, dtype);
      const Buffer dx(gpu(), x);
      Buffer dy(gpu(), x.size());
      gpu().permute(dx.ref(c.x, dtype), dy.ref(y_shape, dtype), c.dims);
      std::vector<uint8_t> on_cpu(x.size());
      cpu().permute(TensorRef{const_cast<uint8_t*>(x.data()), c.x, dtype}, TensorRef{on_cpu.data(), y_shape, dtype},
                    c.dims);
      EXPECT_EQ(dy.read(), on_cpu);
    }
  }
}

TEST(CudaReduce, LongSumsAreAccurateAndDeterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // 2^22 + 3 fp32 values of 0.1f: an fp32 running sum drifts by ~1e-2 relative, while every partial
  // sum in double is exact (multiples of 2^-27 below 2^19 need 46 bits). Twice: the same bits.
  const int64_t n = (int64_t{1} << 22) + 3;
  const std::vector<uint8_t> x = encode(std::vector<double>(static_cast<size_t>(n), 0.1), DType::F32);
  const double stored = static_cast<double>(0.1f);
  const std::vector<double> first = run_gpu(ReduceKind::Sum, x, {n}, DType::F32, {1}, DType::F64);
  const std::vector<double> second = run_gpu(ReduceKind::Sum, x, {n}, DType::F32, {1}, DType::F64);
  EXPECT_EQ(first[0], stored * static_cast<double>(n));
  EXPECT_EQ(first[0], second[0]);
  const std::vector<uint8_t> random = encode(uniform(static_cast<size_t>(n), -1.0, 1.0, 9), DType::F32);
  EXPECT_EQ(run_gpu(ReduceKind::Sum, random, {n}, DType::F32, {1}, DType::F64)[0],
            run_gpu(ReduceKind::Sum, random, {n}, DType::F32, {1}, DType::F64)[0]);
  const std::vector<double> mean = run_gpu(ReduceKind::Mean, x, {n}, DType::F32, {1}, DType::F32);
  EXPECT_EQ(mean[0], static_cast<double>(0.1f));
}

TEST(CudaReduce, RejectsBadDTypesAndShapes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer x(gpu(), 6 * 8), y(gpu(), 6 * 8);
  EXPECT_THROW(gpu().reduce(ReduceKind::Sum, x.ref({2, 3}, DType::I64), y.ref({2, 1}, DType::I64)), Error);
  EXPECT_THROW(gpu().reduce(ReduceKind::Sum, x.ref({2, 3}, DType::F32), y.ref({2, 1}, DType::U8)), Error);
  EXPECT_THROW(gpu().reduce(ReduceKind::Sum, x.ref({2, 3}, DType::F32), y.ref({2}, DType::F32)), Error);
  EXPECT_THROW(gpu().reduce(ReduceKind::Sum, x.ref({2, 3}, DType::F32), y.ref({2, 2}, DType::F32)), Error);
  EXPECT_THROW(gpu().reduce(ReduceKind::Max, x.ref({2, 3}, DType::F32), y.ref({3, 1}, DType::F32)), Error);
}

}  // namespace
}  // namespace demi::backend

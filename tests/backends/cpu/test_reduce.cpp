// Tests for backends/cpu/reduce.cpp: sum, mean, max and min over every kept/reduced pattern against a
// long-double reference, wider outputs, accuracy of long fp32 sums and thread-count independence;
// min and argmin (first minimum, NaN as the minimum) once per ISA level.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }


using demi::backend::ReduceKind;

// Reference: for each x element, its y index (reduced coords set to 0), accumulated in long double.
std::vector<double> reduce_ref(ReduceKind kind, const std::vector<double>& x, const Shape& xs, const Shape& ys_in) {
  const Shape ys = ys_in.empty() ? Shape(xs.size(), 1) : ys_in;
  const int64_t outputs = demi::shape_numel(ys);
  const int64_t count = outputs == 0 ? 0 : static_cast<int64_t>(x.size()) / outputs;
  const long double init = kind == ReduceKind::Max ? -INFINITY : kind == ReduceKind::Min ? INFINITY : 0.0L;
  std::vector<long double> acc(static_cast<size_t>(outputs), init);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rest = i, out = 0, stride = 1;
    for (size_t d = xs.size(); d-- > 0;) {
      const int64_t coord = rest % xs[d];
      rest /= xs[d];
      if (ys[d] != 1) out += coord * stride;
      stride *= ys[d];
    }
    if (kind == ReduceKind::Max) acc[out] = std::max<long double>(acc[out], x[i]);
    else if (kind == ReduceKind::Min) acc[out] = std::min<long double>(acc[out], x[i]);
    else acc[out] += x[i];
  }
  std::vector<double> ref(acc.size());
  for (size_t o = 0; o < acc.size(); ++o)
    ref[o] = static_cast<double>(kind == ReduceKind::Mean ? acc[o] / count : acc[o]);
  return ref;
}

struct ReduceCase {
  const char* name;
  Shape x, y;
};

const ReduceCase kCases[] = {
    {"full [7,9] -> [1,1]", {7, 9}, {1, 1}},
    {"full into a 0-d y", {7, 9}, {}},
    {"0-d", {}, {}},
    {"last dim", {4, 6, 10}, {4, 6, 1}},
    {"middle dim", {4, 6, 10}, {4, 1, 10}},
    {"first dim", {12, 5}, {1, 5}},
    {"batch 1", {1, 10}, {1, 1}},
    {"nothing reduced", {3, 4}, {3, 4}},
    {"size-1 dims in x", {3, 1, 4}, {1, 1, 4}},
    {"interleaved [2,3,4,5] -> [1,3,1,5]", {2, 3, 4, 5}, {1, 3, 1, 5}},
    {"interleaved [2,3,4,5] -> [2,1,4,1]", {2, 3, 4, 5}, {2, 1, 4, 1}},
    {"interleaved, large", {10, 20, 40, 3}, {1, 20, 1, 3}},
    {"long rows", {3, 20000}, {3, 1}},
    {"full, long (partials across threads)", {50000}, {1}},
    {"middle dim, several column chunks", {2, 50, 600}, {2, 1, 600}},
    {"first dim, long: row blocks (a bias gradient)", {4500, 300}, {1, 300}},
    {"kept dim empty", {0, 3}, {0, 1}},
};

struct DtypePair {
  DType x, y;
};
const DtypePair kDtypes[] = {{DType::F32, DType::F32},  {DType::F64, DType::F64}, {DType::F16, DType::F16},
                             {DType::BF16, DType::BF16}, {DType::F16, DType::F32}, {DType::BF16, DType::F32}};

std::string kind_name(ReduceKind k) {
  return k == ReduceKind::Sum ? "sum" : k == ReduceKind::Mean ? "mean" : k == ReduceKind::Max ? "max" : "min";
}

TEST(CpuReduce, MatchesReferenceForEveryPattern) {
  std::mt19937 rng(11);
  for (const ReduceCase& c : kCases) {
    for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min}) {
      for (const DtypePair& dt : kDtypes) {
        SCOPED_TRACE(std::string(c.name) + ", " + kind_name(kind) + ", " + demi::dtype_name(dt.x) + " -> " +
                     demi::dtype_name(dt.y));
        HostTensor x(c.x, dt.x), y(c.y, dt.y);
        // Mostly positive, so a sum has no cancellation and rtol on |ref| is meaningful.
        const std::vector<double> vx = x.randomize(rng, -1.0, 2.0);
        cpu().reduce(kind, x.ref(), y.ref());
        expect_close(y, reduce_ref(kind, vx, c.x, c.y), rounded(dt.y));
      }
    }
  }
}

TEST(CpuReduce, MillionFp32SumStaysAccurate) {
  // A float accumulator drifts by ~1e-3 relative here; double blocks keep ~1e-15.
  for (DType dtype : {DType::F32, DType::F16}) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor x({1000000}, dtype), y({1}, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.1 + 1e-7 * static_cast<double>(i % 1000));
    long double exact = 0;
    for (int64_t i = 0; i < x.numel(); ++i) exact += x.get(i);
    cpu().reduce(ReduceKind::Sum, x.ref(), y.ref());
    EXPECT_NEAR(y.get(0), static_cast<double>(exact), 1e-6 * static_cast<double>(exact));
    cpu().reduce(ReduceKind::Mean, x.ref(), y.ref());
    EXPECT_NEAR(y.get(0), static_cast<double>(exact / 1000000), 1e-6 * static_cast<double>(exact / 1000000));
  }
}

TEST(CpuReduce, SameBitsOnOneOrTwoThreads) {
  const int threads = demi::backend::cpu_threads();
  std::mt19937 rng(12);
  const ReduceCase cases[] = {{"full", {60000}, {1}}, {"rows", {2, 30000}, {2, 1}}, {"middle", {300, 200}, {1, 200}},
                               {"middle, row blocks", {5000, 40}, {1, 40}}};
  for (const ReduceCase& c : cases) {
    SCOPED_TRACE(c.name);
    HostTensor x(c.x, DType::F64), y1(c.y, DType::F64), y2(c.y, DType::F64);
    x.randomize(rng, -1.0, 1.0);
    demi::backend::set_cpu_threads(1);
    cpu().reduce(ReduceKind::Sum, x.ref(), y1.ref());
    demi::backend::set_cpu_threads(2);
    cpu().reduce(ReduceKind::Sum, x.ref(), y2.ref());
    for (int64_t i = 0; i < y1.numel(); ++i) EXPECT_EQ(y1.get(i), y2.get(i)) << "output " << i;
  }
  demi::backend::set_cpu_threads(threads);
}

TEST(CpuReduce, SpecialValuesAndEmptyRanges) {
  HostTensor x({2, 3}, DType::F32), y({2, 1}, DType::F32);
  const double values[] = {1, std::nan(""), 3, 4, 5, -INFINITY};
  for (int i = 0; i < 6; ++i) x.set(i, values[i]);
  cpu().reduce(ReduceKind::Max, x.ref(), y.ref());
  EXPECT_TRUE(std::isnan(y.get(0))) << "max propagates NaN";
  EXPECT_EQ(y.get(1), 5.0);

  HostTensor empty({0, 3}, DType::F32), col({1, 3}, DType::F32);
  cpu().reduce(ReduceKind::Sum, empty.ref(), col.ref());
  EXPECT_EQ(col.get(0), 0.0);
  cpu().reduce(ReduceKind::Mean, empty.ref(), col.ref());
  EXPECT_TRUE(std::isnan(col.get(2)));
  EXPECT_THROW(cpu().reduce(ReduceKind::Max, empty.ref(), col.ref()), demi::Error);
}

TEST(CpuReduce, RejectsBadShapes) {
  HostTensor x({3, 4}, DType::F32), bad({2, 2}, DType::F32), rank({4}, DType::F32), i64({1, 1}, DType::I64);
  try {
    cpu().reduce(ReduceKind::Sum, x.ref(), bad.ref());
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[3, 4]"), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 2]"), std::string::npos) << what;
  }
  EXPECT_THROW(cpu().reduce(ReduceKind::Sum, x.ref(), rank.ref()), demi::Error);
  EXPECT_THROW(cpu().reduce(ReduceKind::Sum, x.ref(), i64.ref()), demi::Error);
}

class CpuExtremes : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, CpuExtremes, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

TEST_P(CpuExtremes, MinOverEveryPatternPropagatesNan) {
  std::mt19937 rng(13);
  for (const ReduceCase& c : kCases) {
    for (DType dtype : kFloating) {
      SCOPED_TRACE(std::string(c.name) + ", " + demi::dtype_name(dtype));
      HostTensor x(c.x, dtype), y(c.y, dtype);
      const std::vector<double> vx = x.randomize(rng, -3.0, 3.0);
      cpu().reduce(ReduceKind::Min, x.ref(), y.ref());
      expect_close(y, reduce_ref(ReduceKind::Min, vx, c.x, c.y), kExact);  // a minimum is one of the values
    }
  }
  HostTensor x({2, 3}, DType::F32), y({2, 1}, DType::F32);
  const double values[] = {1, std::nan(""), -3, 4, -INFINITY, 5};
  for (int i = 0; i < 6; ++i) x.set(i, values[i]);
  cpu().reduce(ReduceKind::Min, x.ref(), y.ref());
  EXPECT_TRUE(std::isnan(y.get(0))) << "min propagates NaN";
  EXPECT_EQ(y.get(1), -INFINITY);
  HostTensor empty({0, 3}, DType::F32), col({1, 3}, DType::F32);
  EXPECT_THROW(cpu().reduce(ReduceKind::Min, empty.ref(), col.ref()), demi::Error);
}

TEST_P(CpuExtremes, ArgminFirstMinimumAndNaN) {
  const double nan = std::nan("");
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    // x [2, 4, 1]: row 0 has a tie at 1 and 3; row 1 a NaN at 2
    HostTensor x({2, 4, 1}, dtype), y({2, 1, 1}, DType::I64);
    const double values[] = {0.5, -3.0, 1.0, -3.0, 1.0, 2.0, nan, -9.0};
    for (int i = 0; i < 8; ++i) x.set(i, values[i]);
    cpu().argmin(x.ref(), y.ref());
    EXPECT_EQ(y.get(0), 1);
    EXPECT_EQ(y.get(1), 2);
    HostTensor cols({1, 2, 4}, dtype), yc({1, 1, 4}, DType::I64);
    for (int i = 0; i < 8; ++i) cols.set(i, values[i]);
    cpu().argmin(cols.ref(), yc.ref());
    expect_close(yc, {0, 0, 1, 1}, kExact);  // 0.5<1, -3<2, 1 vs NaN, -3>-9
  }
  HostTensor empty({2, 0, 1}, DType::F32), ye({2, 1, 1}, DType::I64);
  try {
    cpu().argmin(empty.ref(), ye.ref());
    FAIL() << "expected demi::Error";
  } catch (const demi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("argmin: x [2, 0, 1] has no elements along the reduced dim"),
              std::string::npos) << e.what();
  }
}

}  // namespace

// Tests for backends/cpu/permute.cpp (every element width, against a naive index reference) and
// the argmax kernel of backends/cpu/reduce.cpp (first maximum, NaN as the maximum, every dtype; the
// long columns argmin too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "framework/core/error.h"
#include "support/host_tensor.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

// y[i0, ..., ik] = x at the coordinates (j with j[dims[a]] = i[a]).
std::vector<double> permute_ref(const std::vector<double>& x, const Shape& xs, const std::vector<int64_t>& dims) {
  const size_t rank = xs.size();
  Shape ys(rank);
  for (size_t a = 0; a < rank; ++a) ys[a] = xs[static_cast<size_t>(dims[a])];
  std::vector<double> y(x.size());
  for (int64_t flat = 0; flat < static_cast<int64_t>(y.size()); ++flat) {
    std::vector<int64_t> i(rank), j(rank);
    for (size_t a = rank, rest = static_cast<size_t>(flat); a-- > 0;) {
      i[a] = static_cast<int64_t>(rest % static_cast<size_t>(ys[a]));
      rest /= static_cast<size_t>(ys[a]);
    }
    for (size_t a = 0; a < rank; ++a) j[static_cast<size_t>(dims[a])] = i[a];
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d) src = src * xs[d] + j[d];
    y[static_cast<size_t>(flat)] = x[static_cast<size_t>(src)];
  }
  return y;
}

TEST(CpuPermute, MatchesNaiveReferenceForEveryWidth) {
  struct Case {
    Shape x;
    std::vector<int64_t> dims;
  };
  const Case cases[] = {{{}, {}},           {{5}, {0}},          {{3, 4}, {1, 0}},         {{2, 3, 4}, {2, 0, 1}},
                        {{2, 3, 4, 5}, {0, 3, 2, 1}}, {{1, 7, 1}, {2, 1, 0}}, {{64, 33, 3}, {1, 2, 0}}, {{0, 3}, {1, 0}}};
  std::mt19937 rng(4);
  for (const Case& c : cases) {
    for (DType dtype : {DType::U8, DType::F16, DType::BF16, DType::F32, DType::F64, DType::I64}) {
      SCOPED_TRACE(std::to_string(c.x.size()) + "-d, " + demi::dtype_name(dtype));
      Shape ys;
      for (int64_t d : c.dims) ys.push_back(c.x[static_cast<size_t>(d)]);
      HostTensor x(c.x, dtype), y(ys, dtype);
      const std::vector<double> vx = x.randomize(rng, 0.0, 200.0);
      cpu().permute(x.ref(), y.ref(), c.dims);
      expect_close(y, permute_ref(vx, c.x, c.dims), kExact);
    }
  }
  HostTensor x({2, 3}, DType::F32), y({3, 2}, DType::F32), bad({2, 3}, DType::F32);
  EXPECT_THROW(cpu().permute(x.ref(), y.ref(), {0, 0}), demi::Error);    // not a permutation
  EXPECT_THROW(cpu().permute(x.ref(), bad.ref(), {1, 0}), demi::Error);  // y's shape does not fit
}

TEST(CpuArgmax, FirstMaximumAndNaN) {
  const double nan = std::nan("");
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    // x [2, 4, 1]: row 0 has a tie at 1 and 3; row 1 a NaN at 2
    HostTensor x({2, 4, 1}, dtype), y({2, 1, 1}, DType::I64);
    const double values[] = {0.5, 3.0, -1.0, 3.0, 1.0, 2.0, nan, 9.0};
    for (int i = 0; i < 8; ++i) x.set(i, values[i]);
    cpu().argmax(x.ref(), y.ref());
    EXPECT_EQ(y.get(0), 1);
    EXPECT_EQ(y.get(1), 2);
    // the same values as [1, 2, 4]: argmax over dim 1 of each of the 4 columns
    HostTensor cols({1, 2, 4}, dtype), yc({1, 1, 4}, DType::I64);
    for (int i = 0; i < 8; ++i) cols.set(i, values[i]);
    cpu().argmax(cols.ref(), yc.ref());
    expect_close(yc, {1, 0, 1, 1}, kExact);  // 0.5<1, 3>2, -1<NaN, 3<9
  }
  std::mt19937 rng(5);
  HostTensor big({3, 1000, 7}, DType::F32), y({3, 1, 7}, DType::I64);
  const std::vector<double> v = big.randomize(rng, -1.0, 1.0);
  for (const bool is_min : {false, true}) {  // argmin (test_reduce.cpp) on the same long columns
    SCOPED_TRACE(is_min ? "argmin" : "argmax");
    if (is_min) cpu().argmin(big.ref(), y.ref());
    else cpu().argmax(big.ref(), y.ref());
    for (int64_t o = 0; o < 3; ++o) {
      for (int64_t i = 0; i < 7; ++i) {
        int64_t best = 0;
        for (int64_t r = 1; r < 1000; ++r) {
          const double v_r = v[static_cast<size_t>((o * 1000 + r) * 7 + i)];
          const double v_best = v[static_cast<size_t>((o * 1000 + best) * 7 + i)];
          if (is_min ? v_r < v_best : v_r > v_best) best = r;
        }
        EXPECT_EQ(y.get(o * 7 + i), best);
      }
    }
  }
  HostTensor empty({2, 0, 1}, DType::F32), ye({2, 1, 1}, DType::I64);
  EXPECT_THROW(cpu().argmax(empty.ref(), ye.ref()), demi::Error);
}

}  // namespace

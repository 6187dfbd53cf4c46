// Pins the where kernel of backends/cuda/elementwise.cu: y = cond ? a : b with cond, a and b
// broadcast to y's shape, in every dtype, against a naive index reference and the CPU backend
// (tests/backends/cpu/test_where.cpp's cases); the bits of the chosen element copied (inf, NaN, -0),
// and the checks every backend shares. Skips (one line) without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"
#include "support/broadcast_index.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

using demi::test::broadcast_index;

struct WhereCase {
  const char* name;
  Shape cond, a, b, y;
};

TEST(CudaWhere, MatchesReferenceAndCpuInEveryDtype) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<WhereCase> cases = {
      {"same shapes", {4, 33}, {4, 33}, {4, 33}, {4, 33}},
      {"scalar b (masked_fill)", {4, 33}, {4, 33}, {}, {4, 33}},
      {"row mask", {33}, {5, 33}, {5, 33}, {5, 33}},
      {"column mask, scalar a", {5, 1}, {}, {5, 33}, {5, 33}},
      {"all three broadcast", {2, 1, 7}, {3, 1}, {7}, {2, 3, 7}},
      {"0-d everything", {}, {}, {}, {}},
      {"attention mask [S, S] on [B, H, S, S]", {9, 9}, {2, 3, 9, 9}, {}, {2, 3, 9, 9}},
      {"large, grid-stride loop", {1000}, {1100, 1000}, {1}, {1100, 1000}},
  };
  for (const WhereCase& c : cases) {
    for (const DType dtype : kAllDTypes) {
      std::ostringstream name;
      name << "where " << c.name << " " << dtype;
      SCOPED_TRACE(name.str());
      std::vector<double> cond(static_cast<size_t>(shape_numel(c.cond))), a(static_cast<size_t>(shape_numel(c.a)));
      std::vector<double> b(static_cast<size_t>(shape_numel(c.b)));
      for (size_t i = 0; i < cond.size(); ++i) cond[i] = static_cast<double>((i * 7 + i / 5) % 3);  // 0, 1, 2
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 100);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(100 + i % 100);
      std::vector<double> want(static_cast<size_t>(shape_numel(c.y)));
      for (size_t i = 0; i < want.size(); ++i) {
        const int64_t f = static_cast<int64_t>(i);
        const bool take_a = cond[broadcast_index(f, c.y, c.cond)] != 0;
        want[i] = take_a ? a[broadcast_index(f, c.y, c.a)] : b[broadcast_index(f, c.y, c.b)];
      }
      const std::vector<uint8_t> cond_bytes = encode(cond, DType::U8), a_bytes = encode(a, dtype), b_bytes = encode(b, dtype);
      const Buffer dc(gpu(), cond_bytes), da(gpu(), a_bytes), db(gpu(), b_bytes);
      Buffer dy(gpu(), want.size() * dtype_size(dtype));
      gpu().where(dc.ref(c.cond, DType::U8), da.ref(c.a, dtype), db.ref(c.b, dtype), dy.ref(c.y, dtype));
      const std::vector<uint8_t> got = dy.read();
      expect_same(got, encode(want, dtype), dtype, name.str() + " vs reference");
      std::vector<uint8_t> on_cpu(got.size());
      cpu().where(TensorRef{const_cast<uint8_t*>(cond_bytes.data()), c.cond, DType::U8},
                  TensorRef{const_cast<uint8_t*>(a_bytes.data()), c.a, dtype},
                  TensorRef{const_cast<uint8_t*>(b_bytes.data()), c.b, dtype}, TensorRef{on_cpu.data(), c.y, dtype});
      expect_same(got, on_cpu, dtype, name.str() + " vs CPU");
    }
  }
}

TEST(CudaWhere, CopiesTheChosenBitsAndRejectsWhatTheCpuRejects) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<uint8_t> cond = encode({1, 0, 1, 0}, DType::U8);
    const std::vector<uint8_t> a = encode({-0.0, inf, inf, 1.0}, dtype), b = encode({nan, -inf, nan, -0.0}, dtype);
    const Buffer dc(gpu(), cond), da(gpu(), a), db(gpu(), b);
    Buffer dy(gpu(), a.size());
    gpu().where(dc.ref({4}, DType::U8), da.ref({4}, dtype), db.ref({4}, dtype), dy.ref({4}, dtype));
    const std::vector<uint8_t> got = dy.read();
    const size_t w = dtype_size(dtype);
    for (size_t i = 0; i < 4; ++i) {
      const std::vector<uint8_t>& from = i % 2 == 0 ? a : b;
      EXPECT_EQ(std::memcmp(got.data() + i * w, from.data() + i * w, w), 0) << "element " << i;
    }
  }
  Buffer c(gpu(), 64), x(gpu(), 64), y(gpu(), 64);
  EXPECT_THROW(gpu().where(c.ref({3}, DType::F32), x.ref({3}, DType::F32), x.ref({3}, DType::F32), y.ref({3}, DType::F32)),
               Error);  // cond must be uint8
  EXPECT_THROW(gpu().where(c.ref({3}, DType::U8), x.ref({3}, DType::F32), x.ref({3}, DType::F16), y.ref({3}, DType::F32)),
               Error);  // one dtype
  EXPECT_THROW(gpu().where(c.ref({3}, DType::U8), x.ref({4}, DType::F32), x.ref({3}, DType::F32), y.ref({3}, DType::F32)),
               Error);  // a does not broadcast
}

}  // namespace
}  // namespace demi::backend

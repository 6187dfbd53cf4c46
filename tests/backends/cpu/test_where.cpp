// Tests for backends/cpu/where.cpp, once per ISA level: y = cond ? a : b with cond, a and b
// broadcast to y's shape, in every dtype (a select of bits: NaN payloads, -0 and inf copied, the
// branch not taken never read into y), against a naive index reference; and the checks it shares.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/broadcast_index.h"
#include "support/host_tensor.h"

namespace {

using demi::DType;
using demi::Shape;
using demi::backend::TensorRef;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

using demi::test::broadcast_index;

class CpuWhere : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, CpuWhere, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

struct WhereCase {
  const char* name;
  Shape cond, a, b, y;
};

const WhereCase kCases[] = {
    {"same shapes", {4, 33}, {4, 33}, {4, 33}, {4, 33}},
    {"scalar b (masked_fill)", {4, 33}, {4, 33}, {}, {4, 33}},
    {"row mask", {33}, {5, 33}, {5, 33}, {5, 33}},
    {"column mask, scalar a", {5, 1}, {}, {5, 33}, {5, 33}},
    {"all three broadcast", {2, 1, 7}, {3, 1}, {7}, {2, 3, 7}},
    {"0-d everything", {}, {}, {}, {}},
    {"y larger than all", {1}, {3}, {1}, {2, 3}},
    {"attention mask [S, S] on [B, H, S, S]", {9, 9}, {2, 3, 9, 9}, {}, {2, 3, 9, 9}},
    {"long rows", {2, 5000}, {2, 5000}, {1}, {2, 5000}},
    {"empty", {0, 3}, {3}, {0, 1}, {0, 3}},
};

TEST_P(CpuWhere, MatchesNaiveReferenceInEveryDtype) {
  std::mt19937 rng(7);
  for (const WhereCase& c : kCases) {
    for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::U8}) {
      SCOPED_TRACE(std::string(c.name) + ", " + demi::dtype_name(dtype));
      HostTensor cond(c.cond, DType::U8), a(c.a, dtype), b(c.b, dtype), y(c.y, dtype);
      std::uniform_int_distribution<int> bit(0, 2);
      for (int64_t i = 0; i < cond.numel(); ++i) cond.set(i, bit(rng));  // 0, 1 or 2: any nonzero is true
      for (int64_t i = 0; i < a.numel(); ++i) a.set(i, static_cast<double>(i % 100));
      for (int64_t i = 0; i < b.numel(); ++i) b.set(i, static_cast<double>(100 + i % 100));
      cpu().where(cond.ref(), a.ref(), b.ref(), y.ref());
      std::vector<double> want(static_cast<size_t>(y.numel()));
      for (int64_t i = 0; i < y.numel(); ++i) {
        const bool take_a = cond.get(broadcast_index(i, c.y, c.cond)) != 0;
        want[static_cast<size_t>(i)] =
            take_a ? a.get(broadcast_index(i, c.y, c.a)) : b.get(broadcast_index(i, c.y, c.b));
      }
      expect_close(y, want, kExact);
    }
  }
}

TEST_P(CpuWhere, CopiesBitsAndNeverMixesTheBranches) {
  const double inf = INFINITY;
  for (DType dtype : kFloating) {
    SCOPED_TRACE(demi::dtype_name(dtype));
    HostTensor cond({67}, DType::U8), a({67}, dtype), b({67}, dtype), y({67}, dtype);
    for (int64_t i = 0; i < 67; ++i) {
      cond.set(i, i % 2);
      a.set(i, i % 3 == 0 ? -0.0 : inf);
      b.set(i, i % 3 == 0 ? std::nan("") : -inf);
    }
    cpu().where(cond.ref(), a.ref(), b.ref(), y.ref());
    const size_t width = demi::dtype_size(dtype);
    for (int64_t i = 0; i < 67; ++i) {
      const HostTensor& from = i % 2 ? a : b;
      const auto* want = reinterpret_cast<const uint8_t*>(from.storage.data()) + i * static_cast<int64_t>(width);
      const auto* got = reinterpret_cast<const uint8_t*>(y.storage.data()) + i * static_cast<int64_t>(width);
      EXPECT_EQ(std::memcmp(got, want, width), 0) << "element " << i << ": " << y.get(i) << ", want " << from.get(i);
    }
  }
}

TEST_P(CpuWhere, InPlaceIntoAFullShapeOperand) {
  HostTensor cond({3}, DType::U8), a({2, 3}, DType::F32), b({}, DType::F32);
  cond.set(0, 1), cond.set(1, 0), cond.set(2, 1);
  for (int64_t i = 0; i < 6; ++i) a.set(i, static_cast<double>(i));
  b.set(0, -1.0);
  TensorRef ra = a.ref();
  cpu().where(cond.ref(), ra, b.ref(), ra);  // masked_fill_ in place
  expect_close(a, {0, -1, 2, 3, -1, 5}, kExact);
}

TEST_P(CpuWhere, RejectsBadDtypesShapesAndAliases) {
  HostTensor cond({2, 3}, DType::U8), fcond({2, 3}, DType::F32), a({2, 3}, DType::F32), b({3}, DType::F32);
  HostTensor y({2, 3}, DType::F32), h({3}, DType::F16), wrong({4}, DType::F32);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const demi::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { cpu().where(fcond.ref(), a.ref(), b.ref(), y.ref()); }).find("where: cond must be uint8"),
            std::string::npos);
  EXPECT_NE(message([&] { cpu().where(cond.ref(), a.ref(), h.ref(), y.ref()); }).find("share one dtype"),
            std::string::npos);
  EXPECT_NE(message([&] { cpu().where(cond.ref(), a.ref(), wrong.ref(), y.ref()); })
                .find("where: b [4] does not broadcast to y [2, 3]"),
            std::string::npos);
  const TensorRef ya = a.ref(), first_row{ya.data, {1, 3}, DType::F32};  // y's memory, read broadcast
  EXPECT_NE(message([&] { cpu().where(cond.ref(), first_row, b.ref(), ya); }).find("where: y aliases a [1, 3]"),
            std::string::npos);
}

}  // namespace

// Pins backends/cuda/elementwise.cu (and the memory entries it needs): fill, cast, unary and binary
// on cuda:0 against hand-computed values and the CPU backend, case by case; plus the demi::Error a
// CUDA request gets on a machine without a device. Plain C++: it sees the backend only via kernels.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

// --- Without a device ----------------------------------------------------------------------------

TEST(CudaDevice, RequestWithoutDeviceThrowsNamingTheDevice) {
  if (cuda_device_count() != 0) GTEST_SKIP() << "a CUDA device is present; this pins the error without one";
  try {
    kernels_for(Device::cuda(0));
    FAIL() << "kernels_for(Device::cuda(0)) returned without a CUDA device";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("Device::cpu()"), std::string::npos) << message;
  }
}

// --- With a device -------------------------------------------------------------------------------

TEST(CudaDevice, OutOfRangeIndexThrows) {
  const int count = cuda_device_count();
  if (count == 0) GTEST_SKIP() << kNoDevice;
  try {
    kernels_for(Device::cuda(count));
    FAIL() << "cuda:" << count << " exists although cuda_device_count() is " << count;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu().device(), Device::cuda(0));
}

TEST(CudaMemory, CopiesRoundTripAndOverlapThrows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  std::vector<uint8_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  const Buffer a(gpu(), host), b(gpu(), host.size());
  gpu().copy(a.data(), b.data(), host.size());
  EXPECT_EQ(b.read(), host);
  EXPECT_THROW(gpu().copy(a.data(), static_cast<uint8_t*>(a.data()) + 10, 100), Error);
  const Buffer empty(gpu(), 0);
  EXPECT_NE(empty.data(), nullptr);
}

TEST(CudaElementwise, FillEveryDType) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // 0 and -1 are one repeated byte (memset); 2.5 and 0.1 need the kernel. 2^20 + 3 elements run
  // the grid-stride loop more than once.
  for (const size_t n : {size_t{1}, size_t{1031}, (size_t{1} << 20) + 3}) {
    for (const DType dtype : kAllDTypes) {
      for (const double value : {0.0, -1.0, 2.5, 0.1, 200.75}) {
        if (dtype == DType::U8 && value < 0) continue;
        std::ostringstream name;
        name << "fill(" << value << ") " << dtype << " n=" << n;
        SCOPED_TRACE(name.str());
        const std::vector<uint8_t> want = encode(std::vector<double>(n, value), dtype);
        Buffer y(gpu(), want.size());
        gpu().fill(y.ref({static_cast<int64_t>(n)}, dtype), value);
        expect_same(y.read(), want, dtype, name.str());
      }
    }
  }
  Buffer y(gpu(), 8);
  EXPECT_THROW(gpu().fill(y.ref({1}, DType::U8), 256.0), Error);
  EXPECT_THROW(gpu().fill(y.ref({1}, DType::U8), -1.0), Error);
  EXPECT_THROW(gpu().fill(y.ref({1}, DType::I64), std::nan("")), Error);
}

TEST(CudaElementwise, CastEveryPairOfDTypes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // Values each side can hold: the floating list has halves' overflow (70000 -> inf in fp16),
  // subnormals and double-rounding traps; integer targets get values they fit.
  const std::vector<double> floating = {-100.75, -2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 2.5, 7.9, 100.25,
                                        1000.5, 65504.0, 70000.0, 1e-3, 3e-8, 123456789.123,
                                        // ties after a first rounding to fp32: 1 + ulp/2 + tiny
                                        1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-8 + 0x1p-40};
  const std::vector<double> signed_ints = {-100.75, -2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 2.5, 7.9, 100.25, 1000.5};
  // 255.5 would round to 256 in bf16 (8 significant bits), which uint8 cannot hold: 255 and 254.5
  // (a tie that rounds to 254 in bf16) are the top that every source dtype keeps in range.
  const std::vector<double> unsigned_ints = {0.0, 0.3, 1.0, 2.5, 7.9, 100.25, 254.5, 255.0};
  for (const DType from : kAllDTypes) {
    for (const DType to : kAllDTypes) {
      const std::vector<double>& values = (from == DType::U8 || to == DType::U8) ? unsigned_ints
                                          : (from == DType::I64 || to == DType::I64) ? signed_ints
                                                                                     : floating;
      std::ostringstream name;
      name << "cast " << from << " -> " << to;
      SCOPED_TRACE(name.str());
      const std::vector<uint8_t> source = encode(values, from);
      const std::vector<uint8_t> want = encode(decode(source, from), to);
      const Shape shape = {static_cast<int64_t>(values.size())};
      const Buffer x(gpu(), source);
      Buffer y(gpu(), want.size());
      gpu().cast(x.ref(shape, from), y.ref(shape, to));
      expect_same(y.read(), want, to, name.str());
      std::vector<uint8_t> on_cpu(want.size());
      TensorRef cx{const_cast<uint8_t*>(source.data()), shape, from}, cy{on_cpu.data(), shape, to};
      cpu().cast(cx, cy);
      expect_same(on_cpu, want, to, name.str() + " on the CPU");
    }
  }
  // Into an integer dtype, a value that does not fit throws and names the element.
  const Buffer x(gpu(), encode({1.0, 300.0, std::nan("")}, DType::F32));
  Buffer y(gpu(), 3 * 8);
  try {
    gpu().cast(x.ref({3}, DType::F32), y.ref({3}, DType::U8));
    FAIL() << "cast of 300 to uint8 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu().cast(x.ref({3}, DType::F32), y.ref({3}, DType::I64)), Error);  // NaN
}

struct UnaryCase {
  const char* name;
  UnaryKind kind;
  double alpha, beta;
  std::function<double(double)> ref;  // in double, on the stored input
  bool positive_inputs;
};

TEST(CudaElementwise, UnaryMatchesReferenceAndCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<UnaryCase> cases = {
      {"neg", UnaryKind::Neg, 0, 0, [](double x) { return -x; }, false},
      {"exp", UnaryKind::Exp, 0, 0, [](double x) { return std::exp(x); }, false},
      {"log", UnaryKind::Log, 0, 0, [](double x) { return std::log(x); }, true},
      {"sqrt", UnaryKind::Sqrt, 0, 0, [](double x) { return std::sqrt(x); }, true},
      {"relu", UnaryKind::Relu, 0, 0, [](double x) { return x < 0 ? 0.0 : x; }, false},
      {"gelu", UnaryKind::Gelu, 0, 0, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, false},
      {"pow 2", UnaryKind::Pow, 2, 0, [](double x) { return x * x; }, false},
      {"pow 1.5", UnaryKind::Pow, 1.5, 0, [](double x) { return std::pow(x, 1.5); }, true},
      {"pow 0.5", UnaryKind::Pow, 0.5, 0, [](double x) { return std::sqrt(x); }, true},
      {"pow -0.5", UnaryKind::Pow, -0.5, 0, [](double x) { return 1 / std::sqrt(x); }, true},
      {"pow -1", UnaryKind::Pow, -1, 0, [](double x) { return 1 / x; }, true},
      {"pow 3", UnaryKind::Pow, 3, 0, [](double x) { return x * x * x; }, false},
      {"div_scalar", UnaryKind::DivScalar, 3, 0, [](double x) { return x / 3; }, false},
      {"affine", UnaryKind::Affine, -2, 0.5, [](double x) { return -2 * x + 0.5; }, false},
      {"clamp", UnaryKind::Clamp, -1, 1.5, [](double x) { return std::min(std::max(x, -1.0), 1.5); }, false},
      {"clamp min > max", UnaryKind::Clamp, 1, -1, [](double x) { return std::min(std::max(x, 1.0), -1.0); }, false},
      {"abs", UnaryKind::Abs, 0, 0, [](double x) { return std::fabs(x); }, false},
      {"sign", UnaryKind::Sign, 0, 0, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, false},
  };
  for (const UnaryCase& c : cases) {
    for (const DType dtype : kFloatDTypes) {
      std::ostringstream name;
      name << "unary " << c.name << " " << dtype;
      SCOPED_TRACE(name.str());
      std::vector<double> values = uniform(3000, c.positive_inputs ? 0.01 : -4.0, 4.0, 7);
      values.insert(values.end(), {0.0, -0.0, 1.0, 2.0});
      if (!c.positive_inputs) values.push_back(-1.0);
      const std::vector<uint8_t> source = encode(values, dtype);
      std::vector<double> want = decode(source, dtype);
      for (double& v : want) v = c.ref(v);
      want = decode(encode(want, dtype), dtype);
      const Shape shape = {static_cast<int64_t>(values.size())};
      const Buffer x(gpu(), source);
      Buffer y(gpu(), source.size());
      gpu().unary(c.kind, x.ref(shape, dtype), y.ref(shape, dtype), c.alpha, c.beta);
      const std::vector<double> got = decode(y.read(), dtype);
      expect_close(got, want, device_math(dtype), name.str() + " vs reference");
      std::vector<uint8_t> on_cpu(source.size());
      TensorRef cx{const_cast<uint8_t*>(source.data()), shape, dtype}, cy{on_cpu.data(), shape, dtype};
      cpu().unary(c.kind, cx, cy, c.alpha, c.beta);
      expect_close(got, decode(on_cpu, dtype), device_math(dtype), name.str() + " vs CPU");
    }
  }
  const Buffer x(gpu(), encode({1, 2}, DType::I64));
  EXPECT_THROW(gpu().unary(UnaryKind::Neg, x.ref({2}, DType::I64), x.ref({2}, DType::I64)), Error);
}

struct BroadcastCase {
  const char* name;
  Shape a, b, y;
};

// y[i] = op(a[ia(i)], b[ib(i)]) with numpy broadcasting of a and b to y's shape.
std::vector<double> broadcast_reference(const BroadcastCase& c, const std::vector<double>& a,
                                        const std::vector<double>& b, double (*op)(double, double)) {
  const size_t rank = c.y.size();
  std::vector<double> y(static_cast<size_t>(shape_numel(c.y)));
  std::vector<int64_t> coord(rank, 0);
  for (size_t i = 0; i < y.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i);
    for (size_t d = rank; d-- > 0;) {
      coord[d] = rest % c.y[d];
      rest /= c.y[d];
    }
    auto offset = [&](const Shape& s) {
      int64_t off = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        const int64_t extent = s[k];
        off = off * extent + (extent == 1 ? 0 : coord[rank - s.size() + k]);
      }
      return static_cast<size_t>(off);
    };
    y[i] = op(a[offset(c.a)], b[offset(c.b)]);
  }
  return y;
}

double gelu_backward(double g, double x) {
  const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * x * x) * 0.39894228040143267794;  // 1 / sqrt(2 pi)
  return g * (cdf + x * pdf);
}

TEST(CudaElementwise, BinaryBroadcastsMatchReferenceAndCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<BroadcastCase> shapes = {
      {"same shape", {2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
      {"row bias", {2, 3, 4}, {4}, {2, 3, 4}},
      {"column", {2, 3, 4}, {3, 1}, {2, 3, 4}},
      {"both broadcast", {2, 1, 4}, {3, 1}, {2, 3, 4}},
      {"scalar b", {5}, {}, {5}},
      {"scalar a", {}, {7, 3}, {7, 3}},
      {"y larger than both", {3}, {1}, {2, 3}},
      {"channel of NCHW", {2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}},
      {"large row bias", {300, 1000}, {1000}, {300, 1000}},
  };
  struct Op {
    const char* name;
    BinaryKind kind;
    double (*ref)(double, double);
  };
  const std::vector<Op> ops = {
      {"add", BinaryKind::Add, [](double a, double b) { return a + b; }},
      {"sub", BinaryKind::Sub, [](double a, double b) { return a - b; }},
      {"mul", BinaryKind::Mul, [](double a, double b) { return a * b; }},
      {"div", BinaryKind::Div, [](double a, double b) { return a / b; }},
      {"relu_backward", BinaryKind::ReluBackward, [](double a, double b) { return b <= 0 ? 0.0 : a; }},
      {"gelu_backward", BinaryKind::GeluBackward, gelu_backward},
      {"eq", BinaryKind::Eq, [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {"ne", BinaryKind::Ne, [](double a, double b) { return a != b ? 1.0 : 0.0; }},
      {"lt", BinaryKind::Lt, [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {"le", BinaryKind::Le, [](double a, double b) { return a <= b ? 1.0 : 0.0; }},
      {"gt", BinaryKind::Gt, [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {"ge", BinaryKind::Ge, [](double a, double b) { return a >= b ? 1.0 : 0.0; }},
  };
  for (const BroadcastCase& c : shapes) {
    for (const Op& op : ops) {
      for (const DType dtype : kFloatDTypes) {
        std::ostringstream name;
        name << "binary " << op.name << " " << c.name << " a" << c.a << " b" << c.b << " y" << c.y << " "
             << dtype;
        SCOPED_TRACE(name.str());
        // b away from 0 (div) with both signs (relu_backward).
        std::vector<double> b = uniform(static_cast<size_t>(shape_numel(c.b)), 0.5, 2.0, 11);
        for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];
        const std::vector<uint8_t> a_bytes = encode(uniform(static_cast<size_t>(shape_numel(c.a)), -2, 2, 5), dtype);
        const std::vector<uint8_t> b_bytes = encode(b, dtype);
        const std::vector<double> want = decode(
            encode(broadcast_reference(c, decode(a_bytes, dtype), decode(b_bytes, dtype), op.ref), dtype), dtype);
        const Buffer da(gpu(), a_bytes), db(gpu(), b_bytes);
        Buffer dy(gpu(), want.size() * dtype_size(dtype));
        gpu().binary(op.kind, da.ref(c.a, dtype), db.ref(c.b, dtype), dy.ref(c.y, dtype));
        const std::vector<double> got = decode(dy.read(), dtype);
        expect_close(got, want, device_math(dtype), name.str() + " vs reference");
        std::vector<uint8_t> on_cpu(want.size() * dtype_size(dtype));
        TensorRef ca{const_cast<uint8_t*>(a_bytes.data()), c.a, dtype};
        TensorRef cb{const_cast<uint8_t*>(b_bytes.data()), c.b, dtype};
        TensorRef cy{on_cpu.data(), c.y, dtype};
        cpu().binary(op.kind, ca, cb, cy);
        expect_close(got, decode(on_cpu, dtype), device_math(dtype), name.str() + " vs CPU");
      }
    }
  }
  // In place into a full-shape operand works; shapes that do not broadcast and mixed dtypes throw.
  const Buffer a(gpu(), encode({1, 2, 3}, DType::F32)), b(gpu(), encode({10}, DType::F32));
  gpu().binary(BinaryKind::Add, a.ref({3}, DType::F32), b.ref({1}, DType::F32), a.ref({3}, DType::F32));
  EXPECT_EQ(decode(a.read(), DType::F32), (std::vector<double>{11, 12, 13}));
  Buffer y(gpu(), 64);
  EXPECT_THROW(gpu().binary(BinaryKind::Add, a.ref({3}, DType::F32), b.ref({4}, DType::F32), y.ref({3}, DType::F32)),
               Error);
  EXPECT_THROW(gpu().binary(BinaryKind::Add, a.ref({3}, DType::F32), b.ref({1}, DType::F16), y.ref({3}, DType::F32)),
               Error);
  EXPECT_THROW(gpu().binary(BinaryKind::Add, b.ref({1}, DType::F32), a.ref({3}, DType::F32), b.ref({3}, DType::F32)),
               Error);  // y aliases the broadcast operand a
}

}  // namespace
}  // namespace demi::backend

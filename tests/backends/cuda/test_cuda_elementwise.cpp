// Pins backends/cuda/elementwise.cu (and the memory entries it needs): fill, cast, unary and binary
// on cuda:0 against hand-computed values and the CPU backend, case by case; plus the demi::Error a
// CUDA request gets on a machine without a device. Plain C++: it sees the backend only via kernels.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/kernels.h"

namespace demi::backend {
namespace {

constexpr const char* kNoDevice = "no CUDA device (cuda_device_count() == 0)";

// --- Host model of the dtypes: storing a double rounds once (floating) or truncates (integers) ---

// v rounded to float with round-to-odd: float -> half then rounds once, correctly, from the double.
float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(v) && static_cast<double>(f) != v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --bits;
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

std::vector<uint8_t> encode(const std::vector<double>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = bytes.data() + i * dtype_size(dtype);
    const double v = values[i];
    switch (dtype) {
      case DType::F32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::F64: std::memcpy(p, &v, 8); break;
      case DType::F16: { const uint16_t b = Half(round_to_odd(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::BF16: { const uint16_t b = BFloat16(round_to_odd(v)).bits; std::memcpy(p, &b, 2); break; }
      case DType::I64: { const int64_t n = static_cast<int64_t>(v); std::memcpy(p, &n, 8); break; }
      case DType::U8: *p = static_cast<uint8_t>(v); break;
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); values[i] = f; break; }
      case DType::F64: std::memcpy(&values[i], p, 8); break;
      case DType::F16: { uint16_t b; std::memcpy(&b, p, 2); values[i] = Half::from_bits(b); break; }
      case DType::BF16: { uint16_t b; std::memcpy(&b, p, 2); values[i] = BFloat16::from_bits(b); break; }
      case DType::I64: { int64_t n; std::memcpy(&n, p, 8); values[i] = static_cast<double>(n); break; }
      case DType::U8: values[i] = *p; break;
    }
  }
  return values;
}

// Tolerance atol + rtol * |ref| with rtol from the dtype's epsilon: the device computes in fp32 (or
// fp64) with libdevice's few-ulp functions, the reference in double, each rounded once. atol = rtol
// because inputs are O(1): where terms cancel (gelu at x = -4, gelu' near its zero) the error is
// a few ulps of the terms, not of the small result.
double rtol(DType dtype) {
  switch (dtype) {
    case DType::F64: return 4 * 0x1p-52;
    case DType::F32: return 4 * 0x1p-23;
    case DType::F16: return 4 * 0x1p-10;
    case DType::BF16: return 4 * 0x1p-7;
    default: return 0.0;
  }
}

// Exact comparison of stored bytes, reporting the first few differing elements by value.
void expect_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t width = dtype_size(dtype);
  const std::vector<double> g = decode(got, dtype), w = decode(want, dtype);
  int reported = 0;
  for (size_t i = 0; i < g.size() && reported < 5; ++i) {
    if (std::memcmp(got.data() + i * width, want.data() + i * width, width) == 0) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i];
    ++reported;
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, DType dtype,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double r = rtol(dtype), a = r;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    const bool same_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    if (same_nan || same_inf || std::fabs(got[i] - want[i]) <= a + r * std::fabs(want[i])) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
    ++reported;
  }
}

// --- Device buffers ------------------------------------------------------------------------------

// A raw allocation on a backend, freed on scope exit.
class Buffer {
 public:
  Buffer(Kernels& k, const std::vector<uint8_t>& host) : k_(k), bytes_(host.size()) {
    ptr_ = k_.raw_allocate(bytes_);
    k_.copy_from_host(host.data(), ptr_, bytes_);
  }
  Buffer(Kernels& k, size_t bytes) : k_(k), bytes_(bytes) { ptr_ = k_.raw_allocate(bytes_); }
  ~Buffer() { k_.raw_free(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  TensorRef ref(const Shape& shape, DType dtype) const { return TensorRef{ptr_, shape, dtype}; }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> host(bytes_);
    k_.copy_to_host(ptr_, host.data(), bytes_);
    return host;
  }
  void* data() const { return ptr_; }

 private:
  Kernels& k_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

Kernels& gpu() { return kernels_for(Device::cuda(0)); }
Kernels& cpu() { return kernels_for(Device::cpu()); }

const std::vector<DType> kAllDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8};
const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

std::vector<double> uniform(size_t n, double lo, double hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

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

TEST(CudaDevice, OutOfRangeIndexAndMissingEntriesThrow) {
  const int count = cuda_device_count();
  if (count == 0) GTEST_SKIP() << kNoDevice;
  try {
    kernels_for(Device::cuda(count));
    FAIL() << "cuda:" << count << " exists although cuda_device_count() is " << count;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu().device(), Device::cuda(0));
  try {
    gpu().gemm(GemmArgs{});
    FAIL() << "gemm on CUDA did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not implemented on CUDA yet"), std::string::npos) << e.what();
  }
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
  const std::vector<double> unsigned_ints = {0.0, 0.3, 1.0, 2.5, 7.9, 100.25, 255.5};
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
      {"affine", UnaryKind::Affine, -2, 0.5, [](double x) { return -2 * x + 0.5; }, false},
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
      expect_close(got, want, dtype, name.str() + " vs reference");
      std::vector<uint8_t> on_cpu(source.size());
      TensorRef cx{const_cast<uint8_t*>(source.data()), shape, dtype}, cy{on_cpu.data(), shape, dtype};
      cpu().unary(c.kind, cx, cy, c.alpha, c.beta);
      expect_close(got, decode(on_cpu, dtype), dtype, name.str() + " vs CPU");
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
      {"relu_backward", BinaryKind::ReluBackward, [](double a, double b) { return b > 0 ? a : 0.0; }},
      {"gelu_backward", BinaryKind::GeluBackward, gelu_backward},
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
        expect_close(got, want, dtype, name.str() + " vs reference");
        std::vector<uint8_t> on_cpu(want.size() * dtype_size(dtype));
        TensorRef ca{const_cast<uint8_t*>(a_bytes.data()), c.a, dtype};
        TensorRef cb{const_cast<uint8_t*>(b_bytes.data()), c.b, dtype};
        TensorRef cy{on_cpu.data(), c.y, dtype};
        cpu().binary(op.kind, ca, cb, cy);
        expect_close(got, decode(on_cpu, dtype), dtype, name.str() + " vs CPU");
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

// Pins backends/cuda/conv2d.cu: conv2d forward, backward-data and backward-weight on cuda:0 against
// the CPU backend run in float64 on the very same stored inputs, so each tolerance bounds the
// GPU's error alone (not the sum of two backends' errors); plus the plan cache (a repeat call is
// bit-identical; the TF32 switch is part of the key), empty extents, mixed bias dtypes and the
// error messages, which must be the CPU backend's. Plain C++: it sees the backend via kernels.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  int sh, sw, ph, pw;
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
  Shape x_shape() const { return {n, c, h, w}; }
  Shape w_shape() const { return {o, c, kh, kw}; }
  Shape y_shape() const { return {n, o, oh(), ow()}; }
  std::string name() const {
    std::ostringstream out;
    out << "x " << x_shape() << " w " << w_shape() << " stride (" << sh << ", " << sw << ") pad (" << ph << ", "
        << pw << ")";
    return out.str();
  }
};

// Odd channel counts (3, 5, 17), batches 1 and 4, odd spatial sizes (7, 9) and 32.
const std::vector<ConvCase> kCases = {
    // n, c, h, w, o, kh, kw, sh, sw, ph, pw
    {1, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1},  // 3x3, stride 1, padding 1
    {4, 5, 9, 9, 17, 3, 3, 1, 1, 1, 1},
    {4, 17, 32, 32, 5, 3, 3, 1, 1, 1, 1},
    {4, 3, 32, 32, 17, 3, 3, 2, 2, 1, 1},  // 3x3, stride 2, padding 1
    {1, 17, 9, 9, 3, 3, 3, 2, 2, 1, 1},
    {4, 5, 7, 7, 17, 1, 1, 1, 1, 0, 0},  // 1x1
    {1, 17, 32, 32, 17, 1, 1, 1, 1, 0, 0},
    {4, 3, 9, 9, 5, 5, 5, 1, 1, 0, 0},  // 5x5, no padding
    {1, 17, 32, 32, 5, 5, 5, 1, 1, 0, 0},
    {2, 5, 9, 7, 3, 3, 1, 2, 1, 1, 0},  // H != W, KH != KW, stride and padding differ per axis
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},  // one element everywhere
};

// Half the spacing of the dtype's subnormals (none for fp64): a result may round there.
double half_subnormal(DType dtype) {
  switch (dtype) {
    case DType::F32: return 0x1p-150;
    case DType::F16: return 0x1p-25;
    case DType::BF16: return 0x1p-134;
    default: return 0.0;
  }
}

// Element i of a result in dtype: |got - want| <= eps |want| + acc scale[i] + tiny, i.e.
// Tolerance{eps, acc scale[i] + tiny}, with want the exact (float64) result and scale the same sum
// over absolute values (sum of |x||w| over the receptive field, plus |b|):
// - eps = epsilon(dtype): the result's rounding into the dtype; twice for half types, whose bias is
//   added after cuDNN has rounded the convolution (2^-11 each for fp16, 2^-8 for bf16).
// - acc = accumulated(dtype).rtol (1e-12, 1e-5, eps, eps): fp32 sums up to 425 products here; its
//   error is a few 2^-24 of the scale per term in the worst case and far less on average, whatever
//   the algorithm (GEMM, Winograd, FFT), so 1e-5 of the scale is tight yet holds. TF32 cuts each
//   input to a 10-bit mantissa: 2^-11 relative when rounded, 2^-10 when truncated (as some
//   tensor-core kernels do), two inputs per product, so at most 2^-9 (2e-3) of the scale, ~1e-3
//   when rounded. Half types may keep an algorithm's intermediates (transforms, split sums) in the
//   half type: up to about twice its rounding of the scale. fp64: far below 1e-12.
// - tiny = half_subnormal(dtype).
std::vector<Tolerance> conv_tolerance(DType dtype, const std::vector<double>& scale, bool tf32 = false) {
  const double acc = dtype == DType::F32 && tf32 ? 0x1p-9 : accumulated(dtype, 1).rtol;
  const double tiny = half_subnormal(dtype);
  std::vector<Tolerance> tol;
  for (const double s : scale) tol.push_back({epsilon(dtype), acc * s + tiny});
  return tol;
}

// Values drawn uniformly from [-1, 1], then stored in the dtype: the exact inputs both sides see.
std::vector<double> stored_uniform(int64_t n, DType dtype, unsigned seed) {
  return decode(encode(uniform(static_cast<size_t>(n), -1.0, 1.0, seed), dtype), dtype);
}

std::vector<double> absolute(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

Conv2dArgs make_args(const ConvCase& cc, void* x, void* w, void* y, void* b, DType dtype, DType bias_dtype) {
  Conv2dArgs a;
  a.input = TensorRef{x, cc.x_shape(), dtype};
  a.weight = TensorRef{w, cc.w_shape(), dtype};
  a.output = TensorRef{y, cc.y_shape(), dtype};
  if (b != nullptr) a.bias = TensorRef{b, {cc.o}, bias_dtype};
  a.stride_h = cc.sh;
  a.stride_w = cc.sw;
  a.pad_h = cc.ph;
  a.pad_w = cc.pw;
  return a;
}

using Pass = void (Kernels::*)(const Conv2dArgs&);

// One pass on the CPU backend in float64 over host vectors (the pass reads some and writes the
// others, as Conv2dArgs says); b may be nullptr.
void cpu_f64(Pass pass, const ConvCase& cc, std::vector<double>& x, std::vector<double>& w, std::vector<double>& y,
             std::vector<double>* b) {
  (cpu().*pass)(make_args(cc, x.data(), w.data(), y.data(), b ? b->data() : nullptr, DType::F64, DType::F64));
}

int64_t numel(const Shape& s) { return shape_numel(s); }

// Fills a buffer with all-ones bytes (NaN in every floating dtype), so that an output an entry
// fails to write (or leaves to a stale allocation) shows.
void poison(Buffer& buffer, size_t bytes) {
  const std::vector<uint8_t> ones(bytes, 0xff);
  Buffer source(gpu(), ones);
  if (bytes > 0) gpu().copy(source.data(), buffer.data(), bytes);
}

// The three passes of one case on cuda:0 against float64 on the CPU, each run twice: the second
// call takes the cached plan and must reproduce the first bit for bit.
void check_case(const ConvCase& cc, DType dtype, bool with_bias, DType bias_dtype, bool tf32, unsigned seed) {
  const int64_t nx = numel(cc.x_shape()), nw = numel(cc.w_shape()), ny = numel(cc.y_shape());
  std::vector<double> x = stored_uniform(nx, dtype, seed), w = stored_uniform(nw, dtype, seed + 1);
  std::vector<double> gy = stored_uniform(ny, dtype, seed + 2), b = stored_uniform(cc.o, bias_dtype, seed + 3);
  std::vector<double> ax = absolute(x), aw = absolute(w), agy = absolute(gy), ab = absolute(b);
  const size_t width = dtype_size(dtype);
  const Buffer dx(gpu(), encode(x, dtype)), dw(gpu(), encode(w, dtype)), dgy(gpu(), encode(gy, dtype));
  const Buffer db(gpu(), encode(b, bias_dtype));
  void* bias = with_bias ? db.data() : nullptr;

  {  // forward: y = conv(x, w) + b
    std::vector<double> want(ny), scale(ny);
    cpu_f64(&Kernels::conv2d_forward, cc, x, w, want, with_bias ? &b : nullptr);
    cpu_f64(&Kernels::conv2d_forward, cc, ax, aw, scale, with_bias ? &ab : nullptr);
    Buffer y(gpu(), ny * width);
    poison(y, ny * width);
    const Conv2dArgs args = make_args(cc, dx.data(), dw.data(), y.data(), bias, dtype, bias_dtype);
    gpu().conv2d_forward(args);
    const std::vector<uint8_t> first = y.read();
    expect_close(decode(first, dtype), want, conv_tolerance(dtype, scale, tf32), "forward");
    poison(y, ny * width);
    gpu().conv2d_forward(args);
    expect_same(y.read(), first, dtype, "forward, repeated");
  }
  {  // backward data: grad_x = conv_transpose(grad_y, w)
    std::vector<double> want(nx), scale(nx);
    cpu_f64(&Kernels::conv2d_backward_data, cc, want, w, gy, nullptr);
    cpu_f64(&Kernels::conv2d_backward_data, cc, scale, aw, agy, nullptr);
    Buffer gx(gpu(), nx * width);
    poison(gx, nx * width);
    const Conv2dArgs args = make_args(cc, gx.data(), dw.data(), dgy.data(), nullptr, dtype, bias_dtype);
    gpu().conv2d_backward_data(args);
    const std::vector<uint8_t> first = gx.read();
    expect_close(decode(first, dtype), want, conv_tolerance(dtype, scale, tf32), "backward_data");
    poison(gx, nx * width);
    gpu().conv2d_backward_data(args);
    expect_same(gx.read(), first, dtype, "backward_data, repeated");
  }
  {  // backward weight: grad_w = correlate(x, grad_y), grad_b = sum of grad_y over N, OH, OW
    std::vector<double> want_w(nw), scale_w(nw), want_b(cc.o), scale_b(cc.o);
    cpu_f64(&Kernels::conv2d_backward_weight, cc, x, want_w, gy, with_bias ? &want_b : nullptr);
    cpu_f64(&Kernels::conv2d_backward_weight, cc, ax, scale_w, agy, with_bias ? &scale_b : nullptr);
    Buffer gw(gpu(), nw * width), gb(gpu(), cc.o * dtype_size(bias_dtype));
    poison(gw, nw * width);
    poison(gb, cc.o * dtype_size(bias_dtype));
    const Conv2dArgs args =
        make_args(cc, dx.data(), gw.data(), dgy.data(), with_bias ? gb.data() : nullptr, dtype, bias_dtype);
    gpu().conv2d_backward_weight(args);
    const std::vector<uint8_t> first_w = gw.read(), first_b = gb.read();
    expect_close(decode(first_w, dtype), want_w, conv_tolerance(dtype, scale_w, tf32), "backward_weight grad_w");
    if (with_bias) {
      expect_close(decode(first_b, bias_dtype), want_b, conv_tolerance(bias_dtype, scale_b),
                   "backward_weight grad_b");
    }
    poison(gw, nw * width);
    poison(gb, cc.o * dtype_size(bias_dtype));
    gpu().conv2d_backward_weight(args);
    expect_same(gw.read(), first_w, dtype, "backward_weight grad_w, repeated");
    if (with_bias) expect_same(gb.read(), first_b, bias_dtype, "backward_weight grad_b, repeated");
  }
}

// Sets backend::allow_tf32 for a scope and restores the caller's setting after.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow) : saved_(allow_tf32()) { set_allow_tf32(allow); }
  ~Tf32Scope() { set_allow_tf32(saved_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool saved_;
};

TEST(CudaConv2d, AllPassesMatchFloat64OnTheCpuForEveryDType) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  const Tf32Scope no_tf32(false);
  unsigned seed = 1;
  for (const DType dtype : kFloatDTypes) {
    for (const ConvCase& cc : kCases) {
      for (const bool with_bias : {false, true}) {
        std::ostringstream name;
        name << dtype << " " << cc.name() << (with_bias ? " with bias" : " without bias");
        SCOPED_TRACE(name.str());
        check_case(cc, dtype, with_bias, dtype, false, seed += 10);
      }
    }
  }
}

TEST(CudaConv2d, Tf32StaysWithinItsErrorAndTheSwitchIsPartOfThePlanKey) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  {
    const Tf32Scope tf32(true);
    unsigned seed = 500;
    for (const ConvCase& cc : kCases) {
      SCOPED_TRACE("tf32 " + cc.name());
      check_case(cc, DType::F32, true, DType::F32, true, seed += 10);
    }
  }
  // The same shape with TF32 off, on, off: the last call must take the first call's plan, not the
  // TF32 one (bit-identical, and within fp32's error).
  const ConvCase cc{4, 17, 32, 32, 5, 3, 3, 1, 1, 1, 1};
  std::vector<double> x = stored_uniform(numel(cc.x_shape()), DType::F32, 900);
  std::vector<double> w = stored_uniform(numel(cc.w_shape()), DType::F32, 901);
  std::vector<double> want(numel(cc.y_shape())), scale(want.size());
  std::vector<double> ax = absolute(x), aw = absolute(w);
  cpu_f64(&Kernels::conv2d_forward, cc, x, w, want, nullptr);
  cpu_f64(&Kernels::conv2d_forward, cc, ax, aw, scale, nullptr);
  const Buffer dx(gpu(), encode(x, DType::F32)), dw(gpu(), encode(w, DType::F32));
  Buffer y(gpu(), want.size() * 4);
  const Conv2dArgs args = make_args(cc, dx.data(), dw.data(), y.data(), nullptr, DType::F32, DType::F32);
  std::vector<uint8_t> fp32_result;
  {
    const Tf32Scope off(false);
    gpu().conv2d_forward(args);
    fp32_result = y.read();
    expect_close(decode(fp32_result, DType::F32), want, conv_tolerance(DType::F32, scale), "tf32 off");
  }
  {
    const Tf32Scope on(true);
    gpu().conv2d_forward(args);
    expect_close(decode(y.read(), DType::F32), want, conv_tolerance(DType::F32, scale, true), "tf32 on");
  }
  {
    const Tf32Scope off(false);
    gpu().conv2d_forward(args);
    expect_same(y.read(), fp32_result, DType::F32, "tf32 off again");
  }
}

TEST(CudaConv2d, BiasMayHaveAnotherFloatingDType) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  const Tf32Scope no_tf32(false);
  const ConvCase cc{4, 5, 9, 9, 17, 3, 3, 1, 1, 1, 1};
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::F16, DType::F32}, {DType::BF16, DType::F64}, {DType::F32, DType::F16}, {DType::F64, DType::BF16}};
  unsigned seed = 700;
  for (const auto& [dtype, bias_dtype] : pairs) {
    std::ostringstream name;
    name << dtype << " data, " << bias_dtype << " bias";
    SCOPED_TRACE(name.str());
    check_case(cc, dtype, true, bias_dtype, false, seed += 10);
  }
}

TEST(CudaConv2d, EmptyExtentsWriteZerosOrTheBias) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  // An empty batch (grad_w and grad_b are zeros), no input channels (y is the bias, grad_b the sum
  // of grad_y), no output channels (grad_x is zeros), an empty image padded into a non-empty output.
  const std::vector<ConvCase> cases = {
      {0, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1},
      {2, 0, 7, 7, 5, 3, 3, 1, 1, 1, 1},
      {2, 3, 7, 7, 0, 3, 3, 1, 1, 1, 1},
      {1, 2, 0, 3, 4, 1, 1, 1, 1, 1, 1},
  };
  unsigned seed = 800;
  for (const DType dtype : kFloatDTypes) {
    for (const ConvCase& cc : cases) {
      for (const bool with_bias : {false, true}) {
        std::ostringstream name;
        name << dtype << " " << cc.name() << (with_bias ? " with bias" : " without bias");
        SCOPED_TRACE(name.str());
        check_case(cc, dtype, with_bias, dtype, false, seed += 10);
      }
    }
  }
}

// A message without its trailing " (file:line)", which differs between the backends.
std::string without_location(const std::string& message) {
  const size_t at = message.rfind(" (");
  return at == std::string::npos ? message : message.substr(0, at);
}

TEST(CudaConv2d, BadArgumentsThrowTheCpuBackendsMessages) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  // Valid: x [2, 3, 8, 8], w [4, 3, 3, 3], y [2, 4, 8, 8], bias [4], padding 1; each case breaks one
  // thing. The buffers are large enough for any of them, though no case should read them.
  const Buffer device(gpu(), size_t{1} << 16);
  std::vector<uint8_t> host(size_t{1} << 16);
  struct BadCase {
    std::string what, expected;  // expected: a piece of the message
    std::function<void(Conv2dArgs&)> spoil;
  };
  const std::vector<BadCase> cases = {
      {"weight dtype differs", "must share a dtype", [](Conv2dArgs& a) { a.weight.dtype = DType::F16; }},
      {"integer dtype", "dtype must be floating",
       [](Conv2dArgs& a) { a.input.dtype = a.weight.dtype = a.output.dtype = DType::I64; }},
      {"output shape", "output must be [2, 4, 8, 8]", [](Conv2dArgs& a) { a.output.shape = {2, 4, 7, 8}; }},
      {"channels", "input channels", [](Conv2dArgs& a) { a.weight.shape = {4, 5, 3, 3}; }},
      {"bias size", "bias must be [4]", [](Conv2dArgs& a) { a.bias.shape = {3}; }},
      {"bias dtype", "bias must be floating", [](Conv2dArgs& a) { a.bias.dtype = DType::U8; }},
      {"kernel too large", "does not fit",
       [](Conv2dArgs& a) {
         a.weight.shape = {4, 3, 11, 11};
         a.output.shape = {2, 4, 0, 0};
       }},
      {"stride 0", "need stride >= 1", [](Conv2dArgs& a) { a.stride_w = 0; }},
      {"negative padding", "padding >= 0", [](Conv2dArgs& a) { a.pad_h = -1; }},
      {"input rank", "input must be [N, C, H, W]", [](Conv2dArgs& a) { a.input.shape = {2, 3, 8}; }},
  };
  const std::vector<std::pair<Pass, std::string>> passes = {
      {&Kernels::conv2d_forward, "conv2d_forward"},
      {&Kernels::conv2d_backward_data, "conv2d_backward_data"},
      {&Kernels::conv2d_backward_weight, "conv2d_backward_weight"}};
  for (const BadCase& bad : cases) {
    for (const auto& [pass, op] : passes) {
      SCOPED_TRACE(op + ": " + bad.what);
      auto args_on = [&](void* data) {
        Conv2dArgs a;
        a.input = TensorRef{data, {2, 3, 8, 8}, DType::F32};
        a.weight = TensorRef{data, {4, 3, 3, 3}, DType::F32};
        a.output = TensorRef{data, {2, 4, 8, 8}, DType::F32};
        a.bias = TensorRef{data, {4}, DType::F32};
        a.pad_h = a.pad_w = 1;
        bad.spoil(a);
        return a;
      };
      std::string on_gpu, on_cpu;
      try {
        (gpu().*pass)(args_on(device.data()));
        ADD_FAILURE() << "the CUDA backend accepted it";
      } catch (const Error& e) {
        on_gpu = e.what();
      }
      try {
        (cpu().*pass)(args_on(host.data()));
        ADD_FAILURE() << "the CPU backend accepted it";
      } catch (const Error& e) {
        on_cpu = e.what();
      }
      EXPECT_EQ(without_location(on_gpu), without_location(on_cpu));
      EXPECT_EQ(on_gpu.rfind(op + ": ", 0), 0u) << on_gpu;
      EXPECT_NE(on_gpu.find(bad.expected), std::string::npos) << on_gpu;
    }
  }
}

TEST(CudaConv2d, TensorsBeyondCudnnsIntRangeThrow) {
  if (const std::string why = gpu_lacks(KernelFamily::Conv2d); !why.empty()) GTEST_SKIP() << why;
  // 50000^2 elements > 2^31 - 1; the check looks at shapes only, so a small buffer serves.
  const Buffer device(gpu(), 1024);
  Conv2dArgs a;
  a.input = TensorRef{device.data(), {1, 1, 50000, 50000}, DType::F16};
  a.weight = TensorRef{device.data(), {1, 1, 1, 1}, DType::F16};
  a.output = TensorRef{device.data(), {1, 1, 50000, 50000}, DType::F16};
  for (const Pass pass : {&Kernels::conv2d_forward, &Kernels::conv2d_backward_data, &Kernels::conv2d_backward_weight}) {
    try {
      (gpu().*pass)(a);
      ADD_FAILURE() << "a 2.5e9-element convolution was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("32-bit descriptors; split the batch"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace demi::backend

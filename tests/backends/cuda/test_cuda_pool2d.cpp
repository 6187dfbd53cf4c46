// Pins backends/cuda/pool2d.cu: max and average pooling, forward and backward, on cuda:0 against the
// CPU backend for disjoint, overlapping, padded, gapped and odd-sized windows, U8 and I64 indices,
// ties and NaN, every floating dtype, empty batches, and the errors (shapes, dtypes, bad indices).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

struct PoolCase {
  const char* name;
  Shape x;
  int kh, kw, sh, sw, ph, pw;
};

Shape out_shape(const PoolCase& c) {
  return {c.x[0], c.x[1], (c.x[2] + 2 * c.ph - c.kh) / c.sh + 1, (c.x[3] + 2 * c.pw - c.kw) / c.sw + 1};
}

DType indices_dtype(const PoolCase& c) { return c.kh * c.kw <= 256 ? DType::U8 : DType::I64; }

Pool2dArgs pool_args(PoolKind kind, const PoolCase& c) {
  Pool2dArgs a;
  a.kind = kind;
  a.kernel_h = c.kh, a.kernel_w = c.kw, a.stride_h = c.sh, a.stride_w = c.sw, a.pad_h = c.ph, a.pad_w = c.pw;
  return a;
}

size_t bytes_of(const Shape& s, DType dtype) { return static_cast<size_t>(shape_numel(s)) * dtype_size(dtype); }

// Bytes of all ones: NaN in every floating dtype, so an element a kernel forgets to write shows.
std::vector<uint8_t> poison(const Shape& s, DType dtype) { return std::vector<uint8_t>(bytes_of(s, dtype), 0xff); }

struct Forward {
  std::vector<uint8_t> y, indices;
};

Forward run_forward(Kernels& k, PoolKind kind, const PoolCase& c, DType dtype, const std::vector<uint8_t>& x) {
  const Shape ys = out_shape(c);
  const DType it = indices_dtype(c);
  const Buffer bx(k, x), by(k, poison(ys, dtype)), bi(k, poison(ys, it));
  Pool2dArgs a = pool_args(kind, c);
  a.input = bx.ref(c.x, dtype);
  a.output = by.ref(ys, dtype);
  if (kind == PoolKind::Max) a.indices = bi.ref(ys, it);
  k.pool2d_forward(a);
  return {by.read(), kind == PoolKind::Max ? bi.read() : std::vector<uint8_t>{}};
}

std::vector<uint8_t> run_backward(Kernels& k, PoolKind kind, const PoolCase& c, DType dtype,
                                  const std::vector<uint8_t>& grad_y, const std::vector<uint8_t>& indices) {
  const Shape ys = out_shape(c);
  const Buffer bgy(k, grad_y), bi(k, indices), bgx(k, poison(c.x, dtype));
  Pool2dArgs a = pool_args(kind, c);
  a.input = bgx.ref(c.x, dtype);
  a.output = bgy.ref(ys, dtype);
  if (kind == PoolKind::Max) a.indices = bi.ref(ys, indices_dtype(c));
  k.pool2d_backward(a);
  return bgx.read();
}

std::string case_name(const char* what, const PoolCase& c, DType dtype) {
  std::ostringstream name;
  name << what << " " << c.name << " x" << c.x << " kernel " << c.kh << "x" << c.kw << " stride " << c.sh << "x"
       << c.sw << " pad " << c.ph << "x" << c.pw << " " << dtype;
  return name.str();
}

const std::vector<PoolCase> kCases = {
    {"2x2 s2", {2, 3, 8, 8}, 2, 2, 2, 2, 0, 0},
    {"2x2 s2 odd (last row and column dropped)", {2, 3, 7, 9}, 2, 2, 2, 2, 0, 0},
    {"3x3 s2 p1 (overlapping)", {2, 3, 9, 11}, 3, 3, 2, 2, 1, 1},
    {"3x3 s1 p1", {1, 2, 5, 7}, 3, 3, 1, 1, 1, 1},
    {"2x3 s1x2 p1x0 (asymmetric)", {2, 2, 6, 7}, 2, 3, 1, 2, 1, 0},
    {"2x2 s3 (gaps no window reaches)", {1, 2, 8, 8}, 2, 2, 3, 3, 0, 0},
    {"1x1 s1 on 1x1", {1, 1, 1, 1}, 1, 1, 1, 1, 0, 0},
    {"17x17 s3 p8 (I64 indices)", {1, 2, 20, 19}, 17, 17, 3, 3, 8, 8},
    {"16x16 s4 (256-window, U8 indices)", {1, 2, 19, 21}, 16, 16, 4, 4, 0, 0},
    {"empty batch", {0, 3, 8, 8}, 2, 2, 2, 2, 0, 0},
    {"large 2x2 s2 (grid-stride loops)", {32, 64, 32, 32}, 2, 2, 2, 2, 0, 0},
    {"large 3x3 s2 p1", {16, 64, 31, 31}, 3, 3, 2, 2, 1, 1},
};

// Inputs on a grid of halves in [-3, 3]: exact in every dtype, with many ties inside a window, so
// the choice of the first maximum is pinned.
std::vector<double> tied_values(size_t n, unsigned seed) {
  std::vector<double> v = uniform(n, -3.0, 3.0, seed);
  for (double& x : v) x = std::round(2 * x) / 2;
  return v;
}

TEST(CudaPool2d, MaxForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const PoolCase& c : kCases) {
    for (const DType dtype : kFloatDTypes) {
      const std::string name = case_name("max pool", c, dtype);
      SCOPED_TRACE(name);
      const std::vector<uint8_t> x = encode(tied_values(static_cast<size_t>(shape_numel(c.x)), 3), dtype);
      const Forward want = run_forward(cpu(), PoolKind::Max, c, dtype, x);
      const Forward got = run_forward(gpu(), PoolKind::Max, c, dtype, x);
      expect_close(decode(got.y, dtype), decode(want.y, dtype), device_math(dtype), name + " output");
      expect_same(got.indices, want.indices, indices_dtype(c), name + " indices");
      // Backward from the CPU's indices, so that it is pinned on its own.
      const Shape ys = out_shape(c);
      const std::vector<uint8_t> grad_y = encode(uniform(static_cast<size_t>(shape_numel(ys)), -2, 2, 4), dtype);
      const std::vector<uint8_t> gx_want = run_backward(cpu(), PoolKind::Max, c, dtype, grad_y, want.indices);
      const std::vector<uint8_t> gx_got = run_backward(gpu(), PoolKind::Max, c, dtype, grad_y, want.indices);
      expect_close(decode(gx_got, dtype), decode(gx_want, dtype), device_math(dtype), name + " grad_x");
    }
  }
}

TEST(CudaPool2d, AvgForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (const PoolCase& c : kCases) {
    for (const DType dtype : kFloatDTypes) {
      const std::string name = case_name("avg pool", c, dtype);
      SCOPED_TRACE(name);
      const std::vector<uint8_t> x = encode(uniform(static_cast<size_t>(shape_numel(c.x)), -3, 3, 5), dtype);
      const Forward want = run_forward(cpu(), PoolKind::Avg, c, dtype, x);
      const Forward got = run_forward(gpu(), PoolKind::Avg, c, dtype, x);
      expect_close(decode(got.y, dtype), decode(want.y, dtype), device_math(dtype), name + " output");
      const Shape ys = out_shape(c);
      const std::vector<uint8_t> grad_y = encode(uniform(static_cast<size_t>(shape_numel(ys)), -2, 2, 6), dtype);
      const std::vector<uint8_t> gx_want = run_backward(cpu(), PoolKind::Avg, c, dtype, grad_y, {});
      const std::vector<uint8_t> gx_got = run_backward(gpu(), PoolKind::Avg, c, dtype, grad_y, {});
      expect_close(decode(gx_got, dtype), decode(gx_want, dtype), device_math(dtype), name + " grad_x");
    }
  }
}

TEST(CudaPool2d, MaxPropagatesNaNAndPicksTheFirst) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // One plane 4x6. 2x2 windows: a maximum (5), NaN pairs, all -inf, NaN before a larger value (7),
  // ties (0), NaN after the maximum (1): y = {5, NaN, -inf, NaN, 0, NaN}, indices {1, 0, 0, 0, 0, 1}.
  const std::vector<double> values = {1,   5,   nan, 2,   -inf, -inf,  //
                                      3,   2,   4,   nan, -inf, -inf,  //
                                      nan, 7,   0,   0,   1,    nan,   //
                                      -1,  nan, 0,   0,   nan,  1};
  for (const PoolCase& c : {PoolCase{"2x2 s2", {1, 1, 4, 6}, 2, 2, 2, 2, 0, 0},
                            PoolCase{"3x3 s1 p1", {1, 1, 4, 6}, 3, 3, 1, 1, 1, 1}}) {
    for (const DType dtype : kFloatDTypes) {
      const std::string name = case_name("max pool with NaN", c, dtype);
      SCOPED_TRACE(name);
      const std::vector<uint8_t> x = encode(values, dtype);
      const Forward want = run_forward(cpu(), PoolKind::Max, c, dtype, x);
      const Forward got = run_forward(gpu(), PoolKind::Max, c, dtype, x);
      const std::vector<double> y = decode(got.y, dtype);
      expect_close(y, decode(want.y, dtype), device_math(dtype), name + " output");
      expect_same(got.indices, want.indices, DType::U8, name + " indices");
      if (c.sh != 2) continue;
      EXPECT_EQ(y[0], 5.0);
      EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[3]) && std::isnan(y[5])) << y[1] << " " << y[3] << " " << y[5];
      EXPECT_EQ(y[2], -inf);
      EXPECT_EQ(y[4], 0.0);
      EXPECT_EQ(decode(got.indices, DType::U8), (std::vector<double>{1, 0, 0, 0, 0, 1}));
    }
  }
}

TEST(CudaPool2d, Errors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const PoolCase c{"2x2 s2", {1, 2, 4, 4}, 2, 2, 2, 2, 0, 0};
  const Shape ys = out_shape(c);
  const Buffer x(gpu(), encode(uniform(32, -1, 1, 1), DType::F32));
  Buffer y(gpu(), 256), idx(gpu(), 256);
  auto args = [&](DType x_dtype, DType y_dtype, DType idx_dtype) {
    Pool2dArgs a = pool_args(PoolKind::Max, c);
    a.input = x.ref(c.x, x_dtype);
    a.output = y.ref(ys, y_dtype);
    a.indices = idx.ref(ys, idx_dtype);
    return a;
  };
  gpu().pool2d_forward(args(DType::F32, DType::F32, DType::U8));  // the valid call
  EXPECT_THROW(gpu().pool2d_forward(args(DType::I64, DType::I64, DType::U8)), Error);
  EXPECT_THROW(gpu().pool2d_forward(args(DType::F32, DType::F16, DType::U8)), Error);
  EXPECT_THROW(gpu().pool2d_forward(args(DType::F32, DType::F32, DType::I64)), Error);  // 2x2 takes U8
  Pool2dArgs a = args(DType::F32, DType::F32, DType::U8);
  a.input.shape = {2, 4, 4};
  EXPECT_THROW(gpu().pool2d_forward(a), Error);
  a = args(DType::F32, DType::F32, DType::U8);
  a.output.shape = {1, 2, 3, 2};
  EXPECT_THROW(gpu().pool2d_forward(a), Error);
  a = args(DType::F32, DType::F32, DType::U8);
  a.pad_h = 2;  // more than half the kernel
  EXPECT_THROW(gpu().pool2d_forward(a), Error);
  a = args(DType::F32, DType::F32, DType::U8);
  a.stride_w = 0;
  EXPECT_THROW(gpu().pool2d_forward(a), Error);
  a = args(DType::F32, DType::F32, DType::U8);
  a.kernel_h = 5;  // larger than the 4-row input
  EXPECT_THROW(gpu().pool2d_forward(a), Error);
  a = args(DType::F32, DType::F32, DType::U8);
  a.indices = TensorRef{};
  EXPECT_THROW(gpu().pool2d_forward(a), Error);

  // Backward refuses an index outside its window (4 in a 2x2 window) and names the output element;
  // also an index that points into the padding.
  std::vector<double> bad(static_cast<size_t>(shape_numel(ys)), 3.0);
  bad[5] = 4.0;
  const Buffer bad_idx(gpu(), encode(bad, DType::U8));
  const Buffer grad_y(gpu(), encode(std::vector<double>(bad.size(), 1.0), DType::F32));
  Buffer grad_x(gpu(), bytes_of(c.x, DType::F32));
  a = pool_args(PoolKind::Max, c);
  a.input = grad_x.ref(c.x, DType::F32);
  a.output = grad_y.ref(ys, DType::F32);
  a.indices = bad_idx.ref(ys, DType::U8);
  EXPECT_NO_THROW(gpu().pool2d_backward(a));  // checked on the device, reported at the next synchronisation
  try {
    gpu().synchronize();
    FAIL() << "pool2d_backward accepted index 4 in a 2x2 window";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 at output element 5"), std::string::npos) << e.what();
  }
  const PoolCase padded{"3x3 s2 p1", {1, 1, 4, 4}, 3, 3, 2, 2, 1, 1};
  const Shape ps = out_shape(padded);  // [1, 1, 2, 2]; window 0 starts at (-1, -1)
  const Buffer pad_idx(gpu(), encode({0, 4, 4, 4}, DType::U8));
  Buffer pgx(gpu(), bytes_of(padded.x, DType::F32));
  a = pool_args(PoolKind::Max, padded);
  a.input = pgx.ref(padded.x, DType::F32);
  a.output = grad_y.ref(ps, DType::F32);
  a.indices = pad_idx.ref(ps, DType::U8);
  try {
    gpu().pool2d_backward(a);
    gpu().synchronize();
    FAIL() << "pool2d_backward accepted an index into the padding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 0 at output element 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace demi::backend

// Pins backends/cuda/layer_norm.cu against the CPU backend (tests/backends/cpu/test_layer_norm.cpp
// holds that one against float64): forward (output, mean, rstd) and backward (grad_input,
// grad_weight, grad_bias) in every floating dtype, parameters in the input's dtype or fp32 beside a
// half input, rows on the warp path and on the block path, a row whose large mean defeats
// E[x^2] - E[x]^2, the same bits on every run, and empty inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

DType stats_of(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

struct Inputs {
  int64_t rows, n;
  DType dtype, params;
  bool affine;
  std::vector<uint8_t> x, g, w, b;
};

Inputs make_inputs(int64_t rows, int64_t n, DType dtype, DType params, bool affine, double offset = 0.0) {
  const size_t count = static_cast<size_t>(rows * n);
  std::vector<double> x = uniform(count, -2.0, 3.0, 1);
  for (double& v : x) v += offset;
  return {rows,
          n,
          dtype,
          params,
          affine,
          encode(x, dtype),
          encode(uniform(count, -1.0, 1.0, 2), dtype),
          encode(uniform(static_cast<size_t>(n), 0.5, 1.5, 3), params),
          encode(uniform(static_cast<size_t>(n), -0.5, 0.5, 4), params)};
}

struct Outputs {
  std::vector<uint8_t> y, mean, rstd, gx, gw, gb;
};

// Forward then backward on `k`, through buffers of that backend (at least a byte each).
Outputs run(Kernels& k, const Inputs& in) {
  auto bytes = [](const std::vector<uint8_t>& v) { return v.empty() ? std::vector<uint8_t>(1) : v; };
  const Buffer x(k, bytes(in.x)), g(k, bytes(in.g)), w(k, bytes(in.w)), b(k, bytes(in.b));
  const size_t row_bytes = static_cast<size_t>(in.rows) * dtype_size(stats_of(in.dtype));
  const size_t param_bytes = static_cast<size_t>(in.n) * dtype_size(in.params);
  Buffer y(k, std::max<size_t>(in.x.size(), 1)), gx(k, std::max<size_t>(in.x.size(), 1));
  Buffer mean(k, std::max<size_t>(row_bytes, 1)), rstd(k, std::max<size_t>(row_bytes, 1));
  Buffer gw(k, std::max<size_t>(param_bytes, 1)), gb(k, std::max<size_t>(param_bytes, 1));
  const Shape shape{in.rows, in.n}, rows{in.rows}, cols{in.n};
  LayerNormArgs a;
  a.input = x.ref(shape, in.dtype), a.output = y.ref(shape, in.dtype);
  a.mean = mean.ref(rows, stats_of(in.dtype)), a.rstd = rstd.ref(rows, stats_of(in.dtype));
  a.grad_output = g.ref(shape, in.dtype), a.grad_input = gx.ref(shape, in.dtype);
  if (in.affine) {
    a.weight = w.ref(cols, in.params), a.bias = b.ref(cols, in.params);
    a.grad_weight = gw.ref(cols, in.params), a.grad_bias = gb.ref(cols, in.params);
  }
  a.cols = in.n;
  k.layer_norm_forward(a);
  k.layer_norm_backward(a);
  auto read = [](const Buffer& buf, size_t n) {
    std::vector<uint8_t> v = buf.read();
    v.resize(n);
    return v;
  };
  return {read(y, in.x.size()),  read(mean, row_bytes), read(rstd, row_bytes),
          read(gx, in.x.size()), read(gw, in.affine ? param_bytes : 0), read(gb, in.affine ? param_bytes : 0)};
}

// |got - want| <= rate * max |want| over the tensor: the backends sum in different orders, so the
// error scales with the tensor's magnitude. fp32 and fp64: normalized(d).rtol; halves: 1.5 epsilon,
// each backend rounding its own fp32 result once.
void expect_like_cpu(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dtype,
                     const std::string& what) {
  const std::vector<double> g = decode(got, dtype), w = decode(want, dtype);
  const double rate = is_half(dtype) ? 1.5 * epsilon(dtype) : normalized(dtype).rtol;
  double scale = 0;
  for (double v : w) scale = std::isfinite(v) ? std::max(scale, std::fabs(v)) : scale;
  expect_close(g, w, Tolerance{0.0, rate * std::max(scale, 1e-30)}, what);
}

void expect_outputs_like_cpu(const Inputs& in, const std::string& what) {
  const Outputs c = run(cpu(), in), d = run(gpu(), in);
  expect_like_cpu(d.y, c.y, in.dtype, what + ": output");
  expect_like_cpu(d.mean, c.mean, stats_of(in.dtype), what + ": mean");
  expect_like_cpu(d.rstd, c.rstd, stats_of(in.dtype), what + ": rstd");
  expect_like_cpu(d.gx, c.gx, in.dtype, what + ": grad_input");
  expect_like_cpu(d.gw, c.gw, in.params, what + ": grad_weight");
  expect_like_cpu(d.gb, c.gb, in.params, what + ": grad_bias");
}

struct Geometry {
  int64_t rows, n;
};
// One element; rows on and off the warp's 32 lanes; CCT's rows of 128 and 256 (with 1001 rows: 63
// row blocks of 15 or 16); rows of 1100 and 5000: a block each.
const Geometry kGeometries[] = {{1, 1}, {3, 7}, {5, 37}, {64, 128}, {1001, 256}, {2, 1100}, {3, 5000}};

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (DType dtype : kFloatDTypes) {
    const std::vector<DType> param_dtypes = is_half(dtype) ? std::vector<DType>{dtype, DType::F32}
                                                           : std::vector<DType>{dtype};
    for (DType params : param_dtypes) {
      for (const Geometry& geo : kGeometries) {
        for (bool affine : {true, false}) {
          const std::string what = std::string(dtype_name(dtype)) + " params " + dtype_name(params) + " " +
                                   std::to_string(geo.rows) + "x" + std::to_string(geo.n) +
                                   (affine ? " affine" : "");
          expect_outputs_like_cpu(make_inputs(geo.rows, geo.n, dtype, params, affine), what);
        }
      }
    }
  }
}

// x = 1e4 + U(-2, 3) (100 + U for the halves): the CPU keeps fp32's accuracy here (its test), and
// so must the GPU, with the same statistics.
TEST(CudaLayerNorm, ALargeMeanKeepsTheVarianceAndTheOutput) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (DType dtype : kFloatDTypes) {
    const double offset = is_half(dtype) ? 100.0 : 1e4;
    expect_outputs_like_cpu(make_inputs(3, 256, dtype, dtype, true, offset), std::string("large mean ") +
                                                                                 dtype_name(dtype));
  }
}

TEST(CudaLayerNorm, TheSameBitsOnEveryRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Inputs in = make_inputs(4097, 256, dtype, DType::F32, true);
    const Outputs first = run(gpu(), in), second = run(gpu(), in);
    expect_same(second.y, first.y, dtype, "output");
    expect_same(second.gx, first.gx, dtype, "grad_input");
    expect_same(second.gw, first.gw, DType::F32, "grad_weight");
    expect_same(second.gb, first.gb, DType::F32, "grad_bias");
  }
}

TEST(CudaLayerNorm, EmptyInputs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Outputs rows0 = run(gpu(), make_inputs(0, 5, DType::F32, DType::F32, true));
  EXPECT_EQ(decode(rows0.gw, DType::F32), std::vector<double>(5, 0.0));  // a sum of no rows
  EXPECT_EQ(decode(rows0.gb, DType::F32), std::vector<double>(5, 0.0));
  const Outputs cols0 = run(gpu(), make_inputs(3, 0, DType::BF16, DType::F32, false));
  EXPECT_EQ(decode(cols0.mean, DType::F32), std::vector<double>(3, 0.0));  // torch's statistics of nothing
  for (double v : decode(cols0.rstd, DType::F32)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace demi::backend

// Tests for backends/cpu/layer_norm.cpp against a float64 reference computed from the stored
// values: forward (output, mean, rstd) and backward (grad_input, grad_weight, grad_bias) with and
// without weight and bias, parameters in the input's dtype or fp32 beside a half input, rows on and
// off the summation lanes, a row whose large mean defeats E[x^2] - E[x]^2, the same bits on any
// thread count, empty inputs and the argument errors. Once per ISA level: half rows are widened and
// rounded by per-level conversions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/error_of.h"
#include "support/host_tensor.h"

namespace {

using demi::backend::LayerNormArgs;
using demi::test::error_of;
using testing::HasSubstr;

demi::backend::Kernels& cpu() { return demi::backend::kernels_for(demi::Device::cpu()); }

DType stats_dtype(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// One call's tensors: x [rows, n] and what the kernels read and write.
struct Ln {
  int64_t rows, n;
  DType dtype, param_dtype;
  HostTensor x, y, mean, rstd, g, gx;
  std::optional<HostTensor> w, b, gw, gb;
  double eps = 1e-5;

  Ln(int64_t rows_, int64_t n_, DType d, DType p, bool weight, bool bias)
      : rows(rows_), n(n_), dtype(d), param_dtype(p), x({rows_, n_}, d), y({rows_, n_}, d),
        mean({rows_}, stats_dtype(d)), rstd({rows_}, stats_dtype(d)), g({rows_, n_}, d), gx({rows_, n_}, d) {
    if (weight) w.emplace(Shape{n_}, p), gw.emplace(Shape{n_}, p);
    if (bias) b.emplace(Shape{n_}, p), gb.emplace(Shape{n_}, p);
  }
  void randomize(std::mt19937& rng) {
    x.fill_random(rng, -2.0, 3.0);
    g.fill_random(rng, -1.0, 1.0);
    if (w) w->fill_random(rng, 0.5, 1.5);
    if (b) b->fill_random(rng, -0.5, 0.5);
  }
  LayerNormArgs args() {
    LayerNormArgs a;
    a.input = x.ref(), a.output = y.ref(), a.mean = mean.ref(), a.rstd = rstd.ref();
    a.grad_output = g.ref(), a.grad_input = gx.ref();
    if (w) a.weight = w->ref(), a.grad_weight = gw->ref();
    if (b) a.bias = b->ref(), a.grad_bias = gb->ref();
    a.cols = n;
    a.eps = eps;
    return a;
  }
  void forward() { cpu().layer_norm_forward(args()); }
  void backward() { cpu().layer_norm_backward(args()); }
};

// The float64 results, from the stored values.
struct Reference {
  std::vector<double> y, mean, rstd, gx, gw, gb;
  // Per element, the magnitude of the terms that cancel into it (grad_input's, the sums').
  std::vector<double> gx_terms, gw_terms, gb_terms;
};

Reference reference(const Ln& t) {
  const std::vector<double> x = t.x.values(), g = t.g.values();
  const std::vector<double> w = t.w ? t.w->values() : std::vector<double>(t.n, 1.0);
  const std::vector<double> b = t.b ? t.b->values() : std::vector<double>(t.n, 0.0);
  Reference r;
  r.gw.assign(t.n, 0.0), r.gb.assign(t.n, 0.0), r.gw_terms.assign(t.n, 0.0), r.gb_terms.assign(t.n, 0.0);
  for (int64_t row = 0; row < t.rows; ++row) {
    const double* xr = x.data() + row * t.n;
    const double* gr = g.data() + row * t.n;
    // In long double, the mean corrected by its residual: for a float64 row of mean 1e4, a plain
    // double mean is off by more than the kernel.
    long double m = 0.0L, c = 0.0L, var = 0.0L;
    for (int64_t i = 0; i < t.n; ++i) m += xr[i];
    m /= t.n;
    for (int64_t i = 0; i < t.n; ++i) c += xr[i] - m;
    m += c / t.n;
    for (int64_t i = 0; i < t.n; ++i) var += (xr[i] - m) * (xr[i] - m);
    const long double s = 1.0L / std::sqrt(var / t.n + t.eps);
    r.mean.push_back(static_cast<double>(m)), r.rstd.push_back(static_cast<double>(s));
    double mean_gw = 0.0, mean_gwx = 0.0;
    for (int64_t i = 0; i < t.n; ++i) {
      const double xhat = static_cast<double>((xr[i] - m) * s);
      r.y.push_back(xhat * w[i] + b[i]);
      mean_gw += gr[i] * w[i] / t.n;
      mean_gwx += gr[i] * w[i] * xhat / t.n;
      r.gw[i] += gr[i] * xhat, r.gw_terms[i] += std::fabs(gr[i] * xhat);
      r.gb[i] += gr[i], r.gb_terms[i] += std::fabs(gr[i]);
    }
    for (int64_t i = 0; i < t.n; ++i) {
      const double xhat = static_cast<double>((xr[i] - m) * s), sd = static_cast<double>(s);
      r.gx.push_back(sd * (gr[i] * w[i] - mean_gw - xhat * mean_gwx));
      r.gx_terms.push_back(sd * (std::fabs(gr[i] * w[i]) + std::fabs(mean_gw) + std::fabs(xhat * mean_gwx)));
    }
  }
  return r;
}

// normalized(d) (support/tolerance.h: the error of a normalised value is absolute, set by the
// terms that cancel), with the absolute part scaled by each element's terms.
std::vector<Tolerance> scaled(DType d, const std::vector<double>& terms) {
  std::vector<Tolerance> tol;
  for (double t : terms) tol.push_back({normalized(d).rtol, normalized(d).atol * (1.0 + t)});
  return tol;
}

void expect_forward(const Ln& t, const Reference& r, const std::string& what) {
  expect_close(t.y, r.y, normalized(t.dtype), what + ": output");
  // a mean is a sum of n values (their magnitudes: the mean's own scale)
  expect_close(t.mean, r.mean, accumulated(stats_dtype(t.dtype), t.n), what + ": mean");
  expect_close(t.rstd, r.rstd, normalized(stats_dtype(t.dtype)), what + ": rstd");
}

void expect_backward(const Ln& t, const Reference& r, const std::string& what) {
  demi::test::expect_close(t.gx.values(), r.gx, scaled(t.dtype, r.gx_terms), what + ": grad_input");
  if (t.gw) demi::test::expect_close(t.gw->values(), r.gw, scaled(t.param_dtype, r.gw_terms), what + ": grad_weight");
  if (t.gb) demi::test::expect_close(t.gb->values(), r.gb, scaled(t.param_dtype, r.gb_terms), what + ": grad_bias");
}

class CpuLayerNorm : public demi_test::IsaFixture<std::tuple<demi_test::Level, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
  // The parameters' dtypes a layer_norm of this input takes: its own, and fp32 beside a half input.
  std::vector<DType> param_dtypes() const {
    if (demi::is_half(dtype())) return {dtype(), DType::F32};
    return {dtype()};
  }
};
INSTANTIATE_TEST_SUITE_P(IsaDtypes, CpuLayerNorm,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

struct Geometry {
  int64_t rows, n;
};
// One element; rows shorter than, equal to and longer than the 32 fp32 lanes with tails; CCT's
// rows of 128 and 256; a long row.
const Geometry kGeometries[] = {{1, 1}, {3, 7}, {4, 32}, {5, 37}, {64, 128}, {9, 256}, {2, 1000}};

TEST_P(CpuLayerNorm, ForwardAndBackwardMatchFloat64) {
  std::mt19937 rng(1);
  for (const Geometry& geo : kGeometries) {
    for (DType p : param_dtypes()) {
      for (int affine = 0; affine < 4; ++affine) {  // weight and bias, weight, bias, neither
        const bool weight = affine == 0 || affine == 1, bias = affine == 0 || affine == 2;
        const std::string what = std::to_string(geo.rows) + "x" + std::to_string(geo.n) + " params " +
                                 demi::dtype_name(p) + (weight ? " weight" : "") + (bias ? " bias" : "");
        Ln t(geo.rows, geo.n, dtype(), p, weight, bias);
        t.randomize(rng);
        t.forward();
        t.backward();
        const Reference r = reference(t);
        expect_forward(t, r, what);
        expect_backward(t, r, what);
      }
    }
  }
}

// x = offset + N(0, 1): E[x^2] - E[x]^2 in fp32 loses the variance entirely (1e8 has an ulp of 8),
// the deviations keep it; the output keeps fp32's accuracy too, as the mean is m + c.
TEST_P(CpuLayerNorm, ALargeMeanKeepsTheVarianceAndTheOutput) {
  const bool half = demi::is_half(dtype());
  const double offset = half ? 100.0 : 1e4;  // where the half types still hold a unit's fractions
  std::mt19937 rng(2);
  std::normal_distribution<double> normal(0.0, 1.0);
  Ln t(3, 256, dtype(), dtype(), true, true);
  t.randomize(rng);
  for (int64_t i = 0; i < t.x.numel(); ++i) t.x.set(i, offset + normal(rng));
  t.forward();
  t.backward();
  const Reference r = reference(t);
  expect_forward(t, r, "large mean");
  expect_backward(t, r, "large mean");
  if (dtype() != DType::F32) return;
  // The naive formula on the same values, in fp32 as the kernel computes: far off.
  float sum = 0.0f, sum_sq = 0.0f;
  for (int64_t i = 0; i < t.n; ++i) {
    const float v = static_cast<float>(t.x.get(i));
    sum += v, sum_sq += v * v;
  }
  const float naive_var = sum_sq / t.n - (sum / t.n) * (sum / t.n);
  const double var = 1.0 / (r.rstd[0] * r.rstd[0]) - t.eps;
  EXPECT_GT(std::fabs(naive_var - var), 0.1 * var) << "the naive variance should fail here";
}

TEST_P(CpuLayerNorm, TheSameBitsOnAnyThreadCount) {
  std::mt19937 rng(3);
  const int threads = demi::backend::cpu_threads();
  // 1001 rows: 126 row blocks of 7 or 8 rows, split across 1, 2 and 3 threads differently.
  std::vector<std::vector<double>> results;
  for (int n_threads : {1, 2, 3}) {
    demi::backend::set_cpu_threads(n_threads);
    std::mt19937 same(rng);
    Ln t(1001, 256, dtype(), param_dtypes().back(), true, true);
    t.randomize(same);
    t.forward();
    t.backward();
    std::vector<double> all = t.y.values();
    for (const HostTensor* h : {&t.mean, &t.rstd, &t.gx, &*t.gw, &*t.gb}) {
      const std::vector<double> v = h->values();
      all.insert(all.end(), v.begin(), v.end());
    }
    results.push_back(all);
  }
  demi::backend::set_cpu_threads(threads);
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

TEST_P(CpuLayerNorm, GradientsWantedAloneAreTheSame) {
  std::mt19937 rng(4);
  Ln all(20, 45, dtype(), dtype(), true, true);
  all.randomize(rng);
  all.forward();
  all.backward();
  LayerNormArgs a = all.args();
  HostTensor gx({20, 45}, dtype()), gw({45}, dtype()), gb({45}, dtype());
  a.grad_input = gx.ref(), a.grad_weight = {}, a.grad_bias = {};
  cpu().layer_norm_backward(a);
  EXPECT_EQ(gx.values(), all.gx.values());
  a.grad_input = {}, a.grad_weight = gw.ref();
  cpu().layer_norm_backward(a);
  EXPECT_EQ(gw.values(), all.gw->values());
  a.grad_weight = {}, a.grad_bias = gb.ref();
  cpu().layer_norm_backward(a);
  EXPECT_EQ(gb.values(), all.gb->values());
}

TEST(CpuLayerNormChecks, EmptyInputs) {
  Ln rows0(0, 5, DType::F32, DType::F32, true, true);
  rows0.gw->fill(7.0), rows0.gb->fill(7.0);
  rows0.forward();
  rows0.backward();
  EXPECT_EQ(rows0.gw->values(), std::vector<double>(5, 0.0));  // a sum of no rows
  EXPECT_EQ(rows0.gb->values(), std::vector<double>(5, 0.0));
  Ln cols0(3, 0, DType::BF16, DType::F32, false, false);
  cols0.forward();
  cols0.backward();
  EXPECT_EQ(cols0.mean.values(), std::vector<double>(3, 0.0));  // torch's statistics of nothing
  for (double v : cols0.rstd.values()) EXPECT_TRUE(std::isnan(v));
}

TEST(CpuLayerNormChecks, RefusesBadArguments) {
  Ln t(4, 6, DType::F32, DType::F32, true, true);
  auto forward_with = [&](auto change) {
    return error_of([&] {
      LayerNormArgs a = t.args();
      change(a);
      cpu().layer_norm_forward(a);
    });
  };
  HostTensor w5({5}, DType::F32), w_half({6}, DType::F16), mean3({3}, DType::F32), mean_half({4}, DType::F16);
  HostTensor y_half({4, 6}, DType::F16), x_int({4, 6}, DType::I64);
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.weight = w5.ref(); }),
              HasSubstr("layer_norm: weight [5] must have 6 elements"));
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.bias = w_half.ref(); }),
              HasSubstr("layer_norm: bias must be float32 for a float32 input, got float16"));
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.mean = mean3.ref(), a.rstd = mean3.ref(); }),
              HasSubstr("input [4, 6] has 24 elements, not 3 rows (mean's elements) of 6"));
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.mean = mean_half.ref(); }), HasSubstr("must be float32 with one"));
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.output = y_half.ref(); }),
              HasSubstr("output [4, 6] float16 must have input's dtype"));
  EXPECT_THAT(forward_with([&](LayerNormArgs& a) { a.input = x_int.ref(); }), HasSubstr("input must be floating"));
  // beside a half input, fp32 parameters are fine, but weight and bias must agree
  Ln h(4, 6, DType::BF16, DType::F32, true, true);
  HostTensor b_bf16({6}, DType::BF16);
  LayerNormArgs a = h.args();
  EXPECT_EQ(error_of([&] { cpu().layer_norm_forward(a); }), "(no error)");
  a.bias = b_bf16.ref();
  EXPECT_THAT(error_of([&] { cpu().layer_norm_forward(a); }),
              HasSubstr("bias is bfloat16 but another parameter (or its gradient) is float32"));
  a = h.args();
  a.grad_output = {};
  EXPECT_THAT(error_of([&] { cpu().layer_norm_backward(a); }), HasSubstr("layer_norm_backward: grad_output"));
}

}  // namespace

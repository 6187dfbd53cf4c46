// Pins CpuKernels::pool2d_forward / pool2d_backward (backends/cpu/pool2d.cpp) to naive fp64 loops:
// max (value and argmax-in-window index, U8 or I64) and average with padding counted, every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/isa_test.h"
#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace demi::backend {
namespace {

struct Case {
  const char* name;
  int64_t n, c, h, w;
  int kh, kw, sh, sw, ph, pw;
};

const Case kCases[] = {
    // name                 n  c   h   w  kh  kw  sh sw ph pw
    {"k2_s2", 2, 3, 8, 8, 2, 2, 2, 2, 0, 0},
    {"k3_s2_p1_overlap", 2, 2, 9, 7, 3, 3, 2, 2, 1, 1},
    {"k3_s1_p1", 1, 4, 6, 5, 3, 3, 1, 1, 1, 1},
    {"non_square", 3, 2, 10, 7, 2, 3, 2, 1, 1, 1},
    {"odd_remainder", 2, 2, 7, 7, 2, 2, 2, 2, 0, 0},
    {"k2_s2_wide_odd", 1, 2, 5, 71, 2, 2, 2, 2, 0, 0},       // rows of 35 windows: read in place
    {"k2_s2_tall_narrow", 1, 2, 191, 7, 2, 2, 2, 2, 0, 0},   // rows of 3: gathered, 85 rows at a time
    // Odd heights taken many planes at once (AirNet's 15x15 and 7x7): runs of gathered rows that
    // span planes, skipping the row between them; and rows read in place across planes.
    {"k2_s2_odd_planes_gathered", 3, 37, 15, 15, 2, 2, 2, 2, 0, 0},
    {"k2_s2_odd_planes_3_wide", 2, 50, 7, 7, 2, 2, 2, 2, 0, 0},
    {"k2_s2_odd_planes_in_place", 2, 3, 9, 67, 2, 2, 2, 2, 0, 0},
    {"window_256_u8", 1, 2, 16, 17, 16, 16, 1, 1, 0, 0},
    {"window_289_i64", 2, 3, 17, 18, 17, 17, 1, 1, 0, 0},
};

std::string describe(const Case& c, PoolKind kind, DType dtype) {
  std::ostringstream out;
  out << c.name << (kind == PoolKind::Max ? " max" : " avg") << " dtype=" << dtype << " x=[" << c.n << "," << c.c
      << "," << c.h << "," << c.w << "] kernel=(" << c.kh << "," << c.kw << ") stride=(" << c.sh << "," << c.sw
      << ") pad=(" << c.ph << "," << c.pw << ")";
  return out.str();
}

void run_case(const Case& cs, PoolKind kind, DType dtype) {
  SCOPED_TRACE(describe(cs, kind, dtype));
  const int64_t oh = (cs.h + 2 * cs.ph - cs.kh) / cs.sh + 1, ow = (cs.w + 2 * cs.pw - cs.kw) / cs.sw + 1;
  const int64_t planes = cs.n * cs.c;
  std::mt19937 rng(99);
  HostTensor x(dtype, {cs.n, cs.c, cs.h, cs.w}), y(dtype, {cs.n, cs.c, oh, ow}), gy(dtype, {cs.n, cs.c, oh, ow});
  HostTensor idx(cs.kh * cs.kw <= 256 ? DType::U8 : DType::I64, {cs.n, cs.c, oh, ow});
  x.fill_random(rng), gy.fill_random(rng);
  y.fill(NAN);

  std::vector<double> ref_y(y.numel()), ref_gx(x.numel(), 0.0);
  std::vector<int64_t> ref_idx(y.numel());
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t yi = (p * oh + oy) * ow + ox;
        double best = -INFINITY, sum = 0;
        int64_t arg = -1, arg_x = -1;
        for (int ky = 0; ky < cs.kh; ++ky) {
          for (int kx = 0; kx < cs.kw; ++kx) {
            const int64_t iy = oy * cs.sh - cs.ph + ky, ix = ox * cs.sw - cs.pw + kx;
            if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
            const int64_t xi = (p * cs.h + iy) * cs.w + ix;
            sum += x.get(xi);
            if (x.get(xi) > best) best = x.get(xi), arg = ky * cs.kw + kx, arg_x = xi;
            if (kind == PoolKind::Avg) ref_gx[xi] += gy.get(yi) / (cs.kh * cs.kw);
          }
        }
        ref_y[yi] = kind == PoolKind::Max ? best : sum / (cs.kh * cs.kw);
        ref_idx[yi] = arg;
        if (kind == PoolKind::Max) ref_gx[arg_x] += gy.get(yi);
      }
    }
  }

  Pool2dArgs args;
  args.kind = kind;
  args.kernel_h = cs.kh, args.kernel_w = cs.kw, args.stride_h = cs.sh, args.stride_w = cs.sw;
  args.pad_h = cs.ph, args.pad_w = cs.pw;
  args.input = x.ref(), args.output = y.ref();
  if (kind == PoolKind::Max) args.indices = idx.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.pool2d_forward(args);
  expect_close(y, ref_y, rounded(y.dtype), "y");
  if (kind == PoolKind::Max) {
    int failures = 0;
    for (int64_t i = 0; i < idx.numel(); ++i) {
      if (idx.get(i) != static_cast<double>(ref_idx[i]) && failures++ < 5) {
        ADD_FAILURE() << "indices[" << i << "] = " << idx.get(i) << ", expected " << ref_idx[i];
      }
    }
  }

  HostTensor gx(dtype, x.shape);
  gx.fill(NAN);  // every element must be written, the ones no window picked included
  args.input = gx.ref(), args.output = gy.ref();
  k.pool2d_backward(args);
  expect_close(gx, ref_gx, rounded(gx.dtype), "grad_x");
}

// Once per ISA level: half inputs are widened and rounded by per-level conversion kernels.
class Pool2dParity : public demi_test::IsaFixture<std::tuple<demi_test::Level, DType>> {};

TEST_P(Pool2dParity, MatchesFp64Reference) {
  for (const Case& c : kCases) {
    run_case(c, PoolKind::Max, std::get<1>(GetParam()));
    run_case(c, PoolKind::Avg, std::get<1>(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(IsaDtypes, Pool2dParity,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

TEST(Pool2d, MaxPropagatesNanAndSkipsPadding) {
  // Window 3x3, padding 1 on a 2x2 input of negative values: padding must not win as 0.
  HostTensor x(DType::F32, {1, 1, 2, 2}), y(DType::F32, {1, 1, 2, 2}), idx(DType::U8, {1, 1, 2, 2});
  x.set(0, -5), x.set(1, -3), x.set(2, -4), x.set(3, NAN);
  Pool2dArgs args;
  args.kernel_h = args.kernel_w = 3, args.stride_h = args.stride_w = 1, args.pad_h = args.pad_w = 1;
  args.input = x.ref(), args.output = y.ref(), args.indices = idx.ref();
  kernels_for(Device::cpu()).pool2d_forward(args);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(y.get(i))) << i;
  x.set(3, -6);
  kernels_for(Device::cpu()).pool2d_forward(args);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.get(i), -3.0) << i;
  EXPECT_EQ(idx.get(0), 5.0);  // window of output (0, 0) starts at (-1, -1): (0, 1) is offset 1 * 3 + 2
}

TEST(Pool2d, WholeWindowsPickFirstMaximumOrFirstNan) {
  // 3x3 windows wholly inside the plane (stride 3, no padding) take the path without clipping:
  // ties keep the first, a NaN wins and the first NaN's offset is recorded, all -inf keeps offset 0.
  constexpr int kCases = 5;
  const double windows[kCases][9] = {{1, 4, 2, 4, 0, 4, -1, 3, 4},
                                     {NAN, 9, 1, 2, 3, 4, 5, 6, 7},
                                     {1, 2, 3, 4, NAN, 9, NAN, 2, 1},
                                     {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                                      -INFINITY, -INFINITY},
                                     {-3, -2, -1, -2, -3, -1, -5, -1, -0.5}};
  const double want_y[kCases] = {4, NAN, NAN, -INFINITY, -0.5};
  const double want_idx[kCases] = {1, 0, 4, 0, 8};
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor x(dtype, {1, 1, 3, 3 * kCases}), y(dtype, {1, 1, 1, kCases}), idx(DType::U8, {1, 1, 1, kCases});
    for (int o = 0; o < kCases; ++o) {
      for (int k = 0; k < 9; ++k) x.set((k / 3) * 3 * kCases + 3 * o + k % 3, windows[o][k]);
    }
    Pool2dArgs args;
    args.kernel_h = args.kernel_w = 3, args.stride_h = args.stride_w = 3;
    args.input = x.ref(), args.output = y.ref(), args.indices = idx.ref();
    kernels_for(Device::cpu()).pool2d_forward(args);
    for (int o = 0; o < kCases; ++o) {
      if (std::isnan(want_y[o])) {
        EXPECT_TRUE(std::isnan(y.get(o))) << o;
      } else {
        EXPECT_EQ(y.get(o), want_y[o]) << o;
      }
      EXPECT_EQ(idx.get(o), want_idx[o]) << o;
    }
  }
}

TEST(Pool2d, TwoByTwoPicksFirstMaximumOrFirstNan) {
  // The 2x2 stride-2 fast path (on the values' bits): per window (in row-major window order) ties
  // keep the first, -0 ties +0, a NaN of either sign wins and the first NaN's offset is recorded,
  // infinities order as values; every dtype takes the same path. Backward writes every element
  // once: the window's gradient where its index points, +0 elsewhere (a -0 gradient too, as 0 + -0
  // in the scatter). The windows once (a row gathered into a short run) and repeated over a row
  // of 91 windows (in place, through the vector loop's body and its tail).
  constexpr int kCases = 7;
  const double windows[kCases][4] = {{3, 3, 1, 3},     {1, NAN, 5, NAN},      {-2, -1, -1, -7}, {0, 1, 2, NAN},
                                     {-0.0, 0.0, -0.0, -1}, {1, -NAN, NAN, 2}, {-INFINITY, 7, INFINITY, 8}};
  const double want_y[kCases] = {3, NAN, -1, NAN, -0.0, NAN, INFINITY};
  const double want_idx[kCases] = {0, 1, 1, 3, 0, 1, 2};
  const double grads[kCases] = {0.5, -2, 4, 1.5, -0.0, 3, -1};
  for (int n : {kCases, 13 * kCases}) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(n) + " windows");
      HostTensor x(dtype, {1, 1, 2, 2 * n}), y(dtype, {1, 1, 1, n}), idx(DType::U8, {1, 1, 1, n});
      for (int o = 0; o < n; ++o) {
        for (int k = 0; k < 4; ++k) x.set((k / 2) * 2 * n + 2 * o + k % 2, windows[o % kCases][k]);
      }
      Pool2dArgs args;
      args.kernel_h = args.kernel_w = 2, args.stride_h = args.stride_w = 2;
      args.input = x.ref(), args.output = y.ref(), args.indices = idx.ref();
      kernels_for(Device::cpu()).pool2d_forward(args);
      for (int o = 0; o < n; ++o) {
        const int c = o % kCases;
        if (std::isnan(want_y[c])) {
          EXPECT_TRUE(std::isnan(y.get(o))) << o;
        } else {
          EXPECT_EQ(y.get(o), want_y[c]) << o;
          EXPECT_EQ(std::signbit(y.get(o)), std::signbit(want_y[c])) << o;
        }
        EXPECT_EQ(idx.get(o), want_idx[c]) << o;
      }
      HostTensor gy(dtype, {1, 1, 1, n}), gx(dtype, x.shape);
      for (int o = 0; o < n; ++o) gy.set(o, grads[o % kCases]);
      gx.fill(NAN);
      args.input = gx.ref(), args.output = gy.ref();
      kernels_for(Device::cpu()).pool2d_backward(args);
      for (int o = 0; o < n; ++o) {
        const int c = o % kCases;
        for (int k = 0; k < 4; ++k) {
          const double got = gx.get((k / 2) * 2 * n + 2 * o + k % 2);
          const double want = k == want_idx[c] && grads[c] != 0 ? grads[c] : 0.0;  // +0, never -0
          EXPECT_EQ(got, want) << o << " " << k;
          EXPECT_EQ(std::signbit(got), std::signbit(want)) << o << " " << k;
        }
      }
    }
  }
}

class Pool2dHalf : public demi_test::IsaFixture<demi_test::Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, Pool2dHalf, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

TEST_P(Pool2dHalf, OverlappingGradientsRoundOnce) {
  // Three windows (kernel 1x3, stride 1 on 1x5) all pick the middle element. Their gradients
  // 1 + 2^-11 + 2^-11 sum exactly to 1 + 2^-10 in fp32; added one by one in fp16 each 2^-11 is a
  // tie that rounds back to 1.
  HostTensor x(DType::F16, {1, 1, 1, 5}), y(DType::F16, {1, 1, 1, 3}), idx(DType::U8, {1, 1, 1, 3});
  HostTensor gy(DType::F16, {1, 1, 1, 3}), gx(DType::F16, {1, 1, 1, 5});
  x.fill(0);
  x.set(2, 1);
  Pool2dArgs args;
  args.kernel_h = 1, args.kernel_w = 3, args.stride_h = args.stride_w = 1;
  args.input = x.ref(), args.output = y.ref(), args.indices = idx.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.pool2d_forward(args);
  gy.set(0, 1.0), gy.set(1, std::ldexp(1.0, -11)), gy.set(2, std::ldexp(1.0, -11));
  args.input = gx.ref(), args.output = gy.ref();
  k.pool2d_backward(args);
  EXPECT_EQ(gx.get(2), 1.0 + std::ldexp(1.0, -10));
  for (int i : {0, 1, 3, 4}) EXPECT_EQ(gx.get(i), 0.0) << i;
}

TEST(Pool2d, RejectsBadArguments) {
  Kernels& k = kernels_for(Device::cpu());
  HostTensor x(DType::F32, {1, 1, 4, 4}), y(DType::F32, {1, 1, 2, 2}), idx64(DType::I64, {1, 1, 2, 2});
  HostTensor idx8(DType::U8, {1, 1, 2, 2});
  Pool2dArgs args;
  args.input = x.ref(), args.output = y.ref(), args.indices = idx64.ref();
  EXPECT_THROW(k.pool2d_forward(args), Error);  // a 2x2 window takes U8 indices
  args.indices = idx8.ref();
  EXPECT_NO_THROW(k.pool2d_forward(args));
  idx8.set(2, 7);  // outside a 2x2 window
  EXPECT_THROW(k.pool2d_backward(args), Error);
  // The same in the fifth of 6 planes of odd height, which the kernel takes at once: the message
  // names the element's flat position.
  HostTensor xo(DType::F32, {2, 3, 7, 7}), yo(DType::F32, {2, 3, 3, 3}), idxo(DType::U8, {2, 3, 3, 3});
  args.input = xo.ref(), args.output = yo.ref(), args.indices = idxo.ref();
  ASSERT_NO_THROW(k.pool2d_forward(args));
  idxo.set(4 * 9 + 5, 4);
  try {
    k.pool2d_backward(args);
    ADD_FAILURE() << "index 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at output element 41 "), std::string::npos) << e.what();
  }
  args.pad_h = 2;
  EXPECT_THROW(k.pool2d_forward(args), Error);  // padding over half the kernel
}

}  // namespace
}  // namespace demi::backend

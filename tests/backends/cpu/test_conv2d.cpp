// Pins CpuKernels::conv2d_forward / backward_data / backward_weight (backends/cpu/conv2d.cpp) to
// naive fp64 loops over a table of shapes (kernels 1..7, strides, padding, batch 1) in every dtype,
// once per ISA level (the level's GEMM tile, Winograd transforms, conversions and bf16 tile).
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
  int64_t n, c, h, w, o, kh, kw;
  int sh, sw, ph, pw;
  bool bias;
};

const Case kCases[] = {
    // name                n  c   h   w   o  kh kw sh sw ph pw bias
    {"k3_pad1", 2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, true},
    {"batch1_non_square", 1, 5, 7, 11, 6, 3, 5, 1, 1, 1, 2, true},
    {"k1_pointwise", 3, 8, 6, 5, 7, 1, 1, 1, 1, 0, 0, true},
    {"k1_stride2", 2, 4, 9, 9, 3, 1, 1, 2, 2, 0, 0, false},
    {"k5_stride2_pad2", 3, 3, 13, 10, 5, 5, 5, 2, 2, 2, 2, true},
    {"k7_stride2_pad3", 2, 3, 16, 16, 8, 7, 7, 2, 2, 3, 3, false},
    {"stride_h_only", 2, 2, 10, 9, 3, 3, 3, 2, 1, 0, 1, true},
    {"no_pad_batch4", 4, 6, 12, 12, 16, 3, 3, 1, 1, 0, 0, true},
    {"stride3_big_pad", 2, 2, 5, 5, 2, 3, 3, 3, 3, 2, 2, true},
    {"many_channels", 2, 64, 8, 8, 32, 3, 3, 1, 1, 1, 1, true},
    {"kernel_equals_input", 3, 2, 4, 4, 5, 4, 4, 1, 1, 0, 0, true},
    {"many_row_chunks_k5", 2, 48, 20, 20, 8, 5, 5, 1, 1, 2, 2, true},
    {"row_chunks_stride2", 2, 48, 21, 19, 6, 3, 3, 2, 2, 1, 1, false},
    // SmallCNN's and AirNet's 3x3 / stride 1 / padding 1 at odd sizes: a plane larger than one
    // chunk of rows, many images of a tiny plane, a 1x1 image, channels not multiples of 8 (the
    // packed GEMM's panels and column tiles), small planes run as groups of images side by side.
    {"k3_pad1_grid_slices", 2, 5, 20, 25, 6, 3, 3, 1, 1, 1, 1, true},
    {"k3_pad1_many_small_images", 9, 12, 3, 4, 10, 3, 3, 1, 1, 1, 1, true},
    {"k3_pad1_one_pixel", 3, 2, 1, 1, 3, 3, 3, 1, 1, 1, 1, false},
    {"k3_pad1_image_groups_and_remainder", 13, 4, 8, 8, 5, 3, 3, 1, 1, 1, 1, true},  // 8x8: groups of 6
    // Winograd F(2x2, 3x3) (>= 16 channels each way): odd planes (half tiles at the right and bottom
    // edges), channel counts not multiples of 8, groups of 2 images of 32x32 with a remainder;
    // small planes transformed several images a vector (4 of 7x7, 8 of 4x4 or 3x3) with partial lane groups.
    {"winograd_odd_plane", 3, 16, 15, 13, 20, 3, 3, 1, 1, 1, 1, true},
    {"winograd_7x7_ragged_channels", 4, 17, 7, 7, 23, 3, 3, 1, 1, 1, 1, false},
    {"winograd_image_groups_and_remainder", 5, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, true},
    {"winograd_7x7_lane_groups_and_remainders", 11, 16, 7, 7, 18, 3, 3, 1, 1, 1, 1, true},
    {"winograd_4x4_eight_images_a_vector", 19, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1, false},
    {"winograd_3x3_planes_lane_groups", 11, 16, 3, 3, 20, 3, 3, 1, 1, 1, 1, true},  // AirNet's last layers
    // Backward-weight's products (conv2d_packed.cpp, grad_weight_product): the ones above are small enough
    // for the dot tile; these two are wide enough for the packed tile (Winograd's 64 x 128, and
    // im2col's 144 x 66 in groups of images).
    {"winograd_wide_product", 2, 64, 8, 8, 128, 3, 3, 1, 1, 1, 1, true},
    // bf16 forward and backward-data by F(4x4, 3x3) (conv2d_winograd4.h: up to 64 channels summed,
    // on AVX-512 levels only for channels x outs >= 16384, the last case): partial 4x4 tiles at the
    // right and bottom edges; 7x7 planes transformed 8 images side by side, and a ninth alone
    // (forward only: its backward-data sums 96 channels, which F(2x2) does); rows of nine tiles, the
    // last one partial; 3x3 planes, 16 a lane group and one more; 64 -> 256 (forward only).
    {"winograd4_odd_plane", 3, 64, 15, 13, 64, 3, 3, 1, 1, 1, 1, true},
    {"winograd4_7x7_lane_groups", 9, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, false},
    {"winograd4_long_rows", 2, 24, 9, 34, 48, 3, 3, 1, 1, 1, 1, true},
    {"winograd4_3x3_planes_lane_groups", 17, 32, 3, 3, 64, 3, 3, 1, 1, 1, 1, true},
    {"winograd4_wide_outputs", 2, 64, 7, 9, 256, 3, 3, 1, 1, 1, 1, false},
    {"k3_stride2_wide_product_groups", 5, 16, 9, 9, 66, 3, 3, 2, 2, 1, 1, true},
    // The bf16 tile's implicit GEMM (stride 1, padding below the kernel, >= 16 channels summed):
    // channels past one block of 32 and odd, non-square kernels and paddings, no padding, 1x1,
    // planes in groups of images with a remainder. Small planes with many outputs gather their
    // columns (conv2d_implicit.cpp, on_grid; the last three, in both data passes).
    {"implicit_k2x4_pad1x3", 3, 40, 9, 10, 33, 2, 4, 1, 1, 1, 3, true},
    {"implicit_k3_no_pad", 2, 24, 24, 25, 17, 3, 3, 1, 1, 0, 0, true},
    {"implicit_k3_pad1_groups", 13, 24, 12, 12, 17, 3, 3, 1, 1, 1, 1, true},
    {"implicit_k1_pointwise", 3, 33, 5, 6, 20, 1, 1, 1, 1, 0, 0, false},
    {"implicit_k5_pad2", 2, 16, 22, 23, 16, 5, 5, 1, 1, 2, 2, true},
    {"implicit_gathered_k3x2_tiny_planes", 7, 81, 3, 5, 75, 3, 2, 1, 1, 1, 0, true},
    {"implicit_gathered_3x3_groups", 13, 64, 3, 3, 70, 3, 3, 1, 1, 1, 1, true},
    {"implicit_gathered_one_pixel", 5, 17, 1, 1, 17, 3, 3, 1, 1, 1, 1, false},
    // bf16 backward-weight split by grad_w's rows (conv2d_bf16.cpp, backward_weight_bf16_split): a
    // product past 1 MiB of fp32 (513 x 513), which a default run splits, in panels of 96 channels
    // and a last one of 33 (a partial tile) on AMX; under DEMI_BF16_WEIGHT_GRAD=split (ctest
    // backends.cpu.conv2d.bf16_weight_grad_split) every case goes there, and the 32x32 one runs in
    // chunks of images whose grad_y^T fits L2 (4 + 3 images on AMX, 5 + 2 on AVX512_BF16) and panels
    // of 10 + 7 channels (AMX; 9 + 8 on AVX512_BF16).
    {"bf16_weight_grad_split_1x1", 2, 513, 2, 2, 513, 1, 1, 1, 1, 0, 0, true},
    {"bf16_weight_grad_chunks_and_panels", 7, 17, 32, 32, 33, 3, 3, 1, 1, 1, 1, true},
};

std::string describe(const Case& c, DType dtype) {
  std::ostringstream out;
  out << c.name << " dtype=" << dtype << " x=[" << c.n << "," << c.c << "," << c.h << "," << c.w << "] w=[" << c.o
      << "," << c.c << "," << c.kh << "," << c.kw << "] stride=(" << c.sh << "," << c.sw << ") pad=(" << c.ph << ","
      << c.pw << ")";
  return out.str();
}

void run_case(const Case& cs, DType dtype) {
  SCOPED_TRACE(describe(cs, dtype));
  const int64_t oh = (cs.h + 2 * cs.ph - cs.kh) / cs.sh + 1, ow = (cs.w + 2 * cs.pw - cs.kw) / cs.sw + 1;
  std::mt19937 rng(42);
  HostTensor x(dtype, {cs.n, cs.c, cs.h, cs.w}), w(dtype, {cs.o, cs.c, cs.kh, cs.kw}), b(dtype, {cs.o});
  HostTensor y(dtype, {cs.n, cs.o, oh, ow}), gy(dtype, {cs.n, cs.o, oh, ow});
  x.fill_random(rng), w.fill_random(rng), b.fill_random(rng), gy.fill_random(rng);

  // Visits every (input element, weight element, output element) triple the convolution links.
  auto for_each_tap = [&](auto&& fn) {
    for (int64_t n = 0; n < cs.n; ++n)
      for (int64_t o = 0; o < cs.o; ++o)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox)
            for (int64_t c = 0; c < cs.c; ++c)
              for (int64_t ky = 0; ky < cs.kh; ++ky)
                for (int64_t kx = 0; kx < cs.kw; ++kx) {
                  const int64_t iy = oy * cs.sh - cs.ph + ky, ix = ox * cs.sw - cs.pw + kx;
                  if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
                  fn(((n * cs.c + c) * cs.h + iy) * cs.w + ix, ((o * cs.c + c) * cs.kh + ky) * cs.kw + kx,
                     ((n * cs.o + o) * oh + oy) * ow + ox);
                }
  };
  Kernels& k = kernels_for(Device::cpu());
  Conv2dArgs args;
  args.stride_h = cs.sh, args.stride_w = cs.sw, args.pad_h = cs.ph, args.pad_w = cs.pw;

  {  // forward
    std::vector<double> ref(y.numel(), 0.0);
    for (int64_t i = 0; i < y.numel(); ++i) ref[i] = cs.bias ? b.get(i / (oh * ow) % cs.o) : 0.0;
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { ref[yi] += x.get(xi) * w.get(wi); });
    y.fill(NAN);  // the kernel must write every element
    args.input = x.ref(), args.weight = w.ref(), args.output = y.ref();
    args.bias = cs.bias ? b.ref() : TensorRef{};
    k.conv2d_forward(args);
    expect_close(y, ref, accumulated(y.dtype, cs.c * cs.kh * cs.kw), "forward y");
  }
  {  // backward_data
    HostTensor gx(dtype, x.shape);
    gx.fill(NAN);
    std::vector<double> ref(gx.numel(), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { ref[xi] += gy.get(yi) * w.get(wi); });
    args.input = gx.ref(), args.weight = w.ref(), args.output = gy.ref(), args.bias = TensorRef{};
    k.conv2d_backward_data(args);
    expect_close(gx, ref, accumulated(gx.dtype, cs.o * cs.kh * cs.kw), "grad_x");
  }
  {  // backward_weight
    HostTensor gw(dtype, w.shape), gb(dtype, {cs.o});
    gw.fill(NAN), gb.fill(NAN);
    std::vector<double> ref(gw.numel(), 0.0), ref_b(cs.o, 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { ref[wi] += gy.get(yi) * x.get(xi); });
    for (int64_t i = 0; i < gy.numel(); ++i) ref_b[i / (oh * ow) % cs.o] += gy.get(i);
    args.input = x.ref(), args.weight = gw.ref(), args.output = gy.ref();
    args.bias = cs.bias ? gb.ref() : TensorRef{};
    k.conv2d_backward_weight(args);
    expect_close(gw, ref, accumulated(gw.dtype, cs.n * oh * ow), "grad_w");
    if (cs.bias) expect_close(gb, ref_b, accumulated(gb.dtype, cs.n * oh * ow), "grad_b");
  }
}

using demi_test::Level;
class Conv2dParity : public demi_test::IsaFixture<std::tuple<Level, DType>> {};

TEST_P(Conv2dParity, MatchesFp64Reference) {
  for (const Case& c : kCases) run_case(c, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(IsaDtypes, Conv2dParity,
                         ::testing::Combine(::testing::ValuesIn(demi_test::isa_levels()),
                                            ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16)),
                         demi_test::isa_dtype_name);

class Conv2dHalf : public demi_test::IsaFixture<Level> {};
INSTANTIATE_TEST_SUITE_P(Isa, Conv2dHalf, ::testing::ValuesIn(demi_test::isa_levels()), demi_test::isa_name);

TEST_P(Conv2dHalf, BiasAddedBeforeTheOneRounding) {
  // 1x1 conv over 2 channels: 2^-11 + 2^-22 plus bias 1 is just above the tie between 1 and
  // 1 + 2^-10, so rounding once gives 1 + 2^-10; rounding the product first would give 1.
  HostTensor x(DType::F16, {1, 2, 1, 1}), w(DType::F16, {1, 2, 1, 1}), b(DType::F16, {1}), y(DType::F16, {1, 1, 1, 1});
  x.set(0, std::ldexp(1.0, -11)), x.set(1, std::ldexp(1.0, -22));
  w.fill(1.0), b.fill(1.0);
  Conv2dArgs args;
  args.input = x.ref(), args.weight = w.ref(), args.output = y.ref(), args.bias = b.ref();
  kernels_for(Device::cpu()).conv2d_forward(args);
  EXPECT_EQ(y.get(0), 1.0 + std::ldexp(1.0, -10));
}

TEST_P(Conv2dHalf, Bf16BiasAddedBeforeTheOneRounding) {
  // 2^-8 + 2^-17 plus bias 1 is just above the tie between 1 and 1 + 2^-7 (bf16's step at 1):
  // rounded once, 1 + 2^-7; rounding the sum of products to bf16 first gives the tie, then 1.
  HostTensor x(DType::BF16, {1, 2, 1, 1}), w(DType::BF16, {1, 2, 1, 1}), b(DType::BF16, {1}), y(DType::BF16, {1, 1, 1, 1});
  x.set(0, std::ldexp(1.0, -8)), x.set(1, std::ldexp(1.0, -17));
  w.fill(1.0), b.fill(1.0);
  Conv2dArgs args;
  args.input = x.ref(), args.weight = w.ref(), args.output = y.ref(), args.bias = b.ref();
  kernels_for(Device::cpu()).conv2d_forward(args);
  EXPECT_EQ(y.get(0), 1.0 + std::ldexp(1.0, -7));
}

TEST_P(Conv2dHalf, Bf16AccumulatesInFp32InEveryPass) {
  // A 3x3 convolution (Winograd-shaped: 16 channels each way, or the bf16 tile's direct GEMM) whose
  // only nonzero tap is the centre: each output sums 1 and eight 2^-8. Added one by one in bf16
  // each 2^-8 is a tie that rounds back to 1; in fp32 the sum is 1 + 2^-5, exact in bf16.
  const int64_t c = 16, o = 16, hw = 4;
  HostTensor x(DType::BF16, {1, c, hw, hw}), w(DType::BF16, {o, c, 3, 3}), y(DType::BF16, {1, o, hw, hw});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = i / (hw * hw);
    x.set(i, ch == 0 ? 1.0 : ch <= 8 ? std::ldexp(1.0, -8) : 0.0);
  }
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, i % 9 == 4 ? 1.0 : 0.0);
  Conv2dArgs args;
  args.stride_h = args.stride_w = args.pad_h = args.pad_w = 1;
  args.input = x.ref(), args.weight = w.ref(), args.output = y.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.conv2d_forward(args);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.get(i), 1.0 + std::ldexp(1.0, -5)) << "y[" << i << "]";
  // backward-data is the same sum with the roles of o and c swapped: grad_y laid out like x.
  HostTensor gx(DType::BF16, x.shape);
  args.input = gx.ref(), args.output = x.ref();
  k.conv2d_backward_data(args);
  for (int64_t i = 0; i < gx.numel(); ++i) ASSERT_EQ(gx.get(i), 1.0 + std::ldexp(1.0, -5)) << "grad_x[" << i << "]";
  // backward-weight sums over positions: grad_y 1 at one pixel and 2^-8 at eight others, x = 1.
  HostTensor ones(DType::BF16, x.shape), gy(DType::BF16, y.shape), gw(DType::BF16, w.shape);
  ones.fill(1.0);
  for (int64_t i = 0; i < gy.numel(); ++i) {
    const int64_t p = i % (hw * hw);
    gy.set(i, p == 5 ? 1.0 : p <= 8 ? std::ldexp(1.0, -8) : 0.0);  // 1 and eight 2^-8 per plane
  }
  args.input = ones.ref(), args.output = gy.ref(), args.weight = gw.ref();
  k.conv2d_backward_weight(args);
  ASSERT_EQ(gw.get(4), 1.0 + std::ldexp(1.0, -5)) << "grad_w centre tap";
}

TEST_P(Conv2dHalf, OverflowBecomesInf) {
  HostTensor x(DType::F16, {1, 1, 1, 1}), w(DType::F16, {1, 1, 1, 1}), y(DType::F16, {1, 1, 1, 1});
  x.fill(256), w.fill(256);
  Conv2dArgs args;
  args.input = x.ref(), args.weight = w.ref(), args.output = y.ref();
  kernels_for(Device::cpu()).conv2d_forward(args);
  EXPECT_EQ(y.get(0), INFINITY);
}

TEST(Conv2d, RejectsBadShapes) {
  Kernels& k = kernels_for(Device::cpu());
  HostTensor x(DType::F32, {2, 3, 8, 8}), w(DType::F32, {4, 3, 3, 3}), y(DType::F32, {2, 4, 6, 6});
  HostTensor w_bad(DType::F32, {4, 2, 3, 3}), y_bad(DType::F32, {2, 4, 8, 8}), x16(DType::F16, {2, 3, 8, 8});
  Conv2dArgs args;
  args.input = x.ref(), args.weight = w.ref(), args.output = y.ref();
  EXPECT_NO_THROW(k.conv2d_forward(args));
  args.weight = w_bad.ref();
  EXPECT_THROW(k.conv2d_forward(args), Error);  // channel mismatch
  args.weight = w.ref(), args.output = y_bad.ref();
  EXPECT_THROW(k.conv2d_forward(args), Error);  // output extent does not follow from the padding
  args.output = y.ref(), args.input = x16.ref();
  EXPECT_THROW(k.conv2d_backward_weight(args), Error);  // mixed dtypes
}

}  // namespace
}  // namespace demi::backend

// Pins CpuKernels::batch_norm_forward / batch_norm_backward (backends/cpu/batch_norm*.cpp) to naive
// fp64 formulas: training and eval statistics, running-stat updates, optional affine, all dtypes;
// and the fused ReLU to the separate ReLU kernels, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/kernels.h"
#include "support/host_tensor.h"

namespace demi::backend {
namespace {

struct Case {
  const char* name;
  Shape shape;
  bool affine;
  double mean, spread;  // of the input values
};

const Case kCases[] = {
    {"nc", {16, 5}, true, 0.5, 2.0},
    {"nc_no_affine", {7, 3}, false, -1.0, 1.0},
    {"nchw", {4, 3, 5, 6}, true, 0.0, 1.0},
    {"nchw_batch1", {1, 4, 3, 3}, true, 2.0, 0.5},
    {"nchw_two_values", {2, 2, 1, 1}, false, 0.0, 1.0},
    {"nchw_large_mean", {8, 3, 6, 5}, true, 1000.0, 1.0},
    {"nchw_many_channels", {3, 40, 4, 4}, true, 0.0, 3.0},
    // A channel of 1125 values: half types sum their widened channel in blocks of 1024 that cut a
    // plane (batch_norm_channel.h, sum_blocks), with a mean well away from 0.
    {"nchw_channel_past_one_block", {5, 3, 15, 15}, true, 50.0, 2.0},
    // 7x7 planes: fp32 gathers the channel too (planes under 100 values), 1960 values, two blocks.
    {"nchw_small_planes_past_one_block", {40, 2, 7, 7}, true, 50.0, 2.0},
    // 17x17 planes, one by one in fp32: each longer than a block of the GELU kernel (gelu.h).
    {"nchw_planes_past_a_gelu_block", {3, 2, 17, 17}, true, 0.0, 1.5},
    // 12x12 planes: half types read planes of 100 values or more as such (isa::BatchNormHalf), here
    // with a mean far from 0 (hi + lo) and without weight and bias.
    {"nchw_direct_half_planes_large_mean", {6, 2, 12, 12}, false, 1000.0, 8.0},
    // 7 channels of 2304 values: enough work to split the channel loop across threads (common.h's
    // parallel_for, too little work in every case above), 4 | 3 on two threads, 3 | 3 | 1 on three.
    {"nchw_channels_split_across_threads", {4, 7, 24, 24}, true, 0.0, 1.0},
};

std::string describe(const Case& c, DType dtype) {
  std::ostringstream out;
  out << c.name << " dtype=" << dtype << " shape=" << c.shape << " affine=" << c.affine;
  return out.str();
}

void run_case(const Case& cs, DType dtype) {
  SCOPED_TRACE(describe(cs, dtype));
  const DType sd = dtype == DType::F64 ? DType::F64 : DType::F32;
  const int64_t n = cs.shape[0], c = cs.shape[1], hw = cs.shape.size() == 4 ? cs.shape[2] * cs.shape[3] : 1;
  const double count = static_cast<double>(n * hw), eps = 1e-5, momentum = 0.1;
  auto at = [&](int64_t ni, int64_t ci, int64_t i) { return (ni * c + ci) * hw + i; };
  std::mt19937 rng(5);
  HostTensor x(dtype, cs.shape), y(dtype, cs.shape), gy(dtype, cs.shape), gx(dtype, cs.shape);
  HostTensor w(sd, {c}), b(sd, {c}), rm(sd, {c}), rv(sd, {c}), save_mean(sd, {c}), save_invstd(sd, {c});
  HostTensor gw(sd, {c}), gb(sd, {c});
  x.fill_random(rng, cs.mean - cs.spread, cs.mean + cs.spread), gy.fill_random(rng, -1.0, 1.0);
  w.fill_random(rng, 0.5, 1.5), b.fill_random(rng, -0.5, 0.5);
  rm.fill_random(rng, -0.5, 0.5), rv.fill_random(rng, 0.5, 1.5);
  std::vector<double> rm0(c), rv0(c);
  for (int64_t i = 0; i < c; ++i) rm0[i] = rm.get(i), rv0[i] = rv.get(i);

  // Statistics in long double, so that the fp64 kernel is checked against something better than
  // itself (a mean of 1000 summed in double is off by ~1e-12).
  std::vector<double> mean(c), var(c), invstd(c);
  for (int64_t ci = 0; ci < c; ++ci) {
    long double s = 0, sq = 0;
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < hw; ++i) s += x.get(at(ni, ci, i));
    const long double m = s / count;
    mean[ci] = static_cast<double>(m);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < hw; ++i) sq += (x.get(at(ni, ci, i)) - m) * (x.get(at(ni, ci, i)) - m);
    var[ci] = static_cast<double>(sq / count);
    invstd[ci] = 1 / std::sqrt(var[ci] + eps);
  }
  auto affine = [&](int64_t ci, double xhat) {
    return cs.affine ? xhat * w.get(ci) + b.get(ci) : xhat;
  };

  BatchNormArgs args;
  args.input = x.ref(), args.output = y.ref();
  if (cs.affine) args.weight = w.ref(), args.bias = b.ref();
  args.running_mean = rm.ref(), args.running_var = rv.ref();
  args.save_mean = save_mean.ref(), args.save_invstd = save_invstd.ref();
  args.momentum = momentum, args.eps = eps;
  Kernels& k = kernels_for(Device::cpu());

  {  // training forward
    SCOPED_TRACE("train forward");
    std::vector<double> ref_y(x.numel()), ref_rm(c), ref_rv(c);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t i = 0; i < hw; ++i) {
          const long double d = x.get(at(ni, ci, i)) - static_cast<long double>(mean[ci]);
          ref_y[at(ni, ci, i)] = affine(ci, static_cast<double>(d * invstd[ci]));
        }
    for (int64_t ci = 0; ci < c; ++ci) {
      ref_rm[ci] = (1 - momentum) * rm0[ci] + momentum * mean[ci];
      ref_rv[ci] = (1 - momentum) * rv0[ci] + momentum * var[ci] * count / (count - 1);
    }
    k.batch_norm_forward(args);
    expect_close(y, ref_y, normalized(y.dtype), "y");
    expect_close(save_mean, mean, normalized(save_mean.dtype), "save_mean");
    expect_close(save_invstd, invstd, normalized(save_invstd.dtype), "save_invstd");
    expect_close(rm, ref_rm, normalized(rm.dtype), "running_mean");
    expect_close(rv, ref_rv, normalized(rv.dtype), "running_var");
  }
  {  // eval forward, with the running statistics just written
    SCOPED_TRACE("eval forward");
    std::vector<double> ref_y(x.numel());
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t i = 0; i < hw; ++i)
          ref_y[at(ni, ci, i)] = affine(ci, (x.get(at(ni, ci, i)) - rm.get(ci)) / std::sqrt(rv.get(ci) + eps));
    y.fill(NAN);
    args.mode = BatchNormMode::Eval;
    k.batch_norm_forward(args);
    expect_close(y, ref_y, normalized(y.dtype), "y");
  }
  {  // backward from the saved statistics, exactly as stored
    SCOPED_TRACE("backward");
    std::vector<double> ref_gx(x.numel()), ref_gw(c), ref_gb(c);
    for (int64_t ci = 0; ci < c; ++ci) {
      const double m = save_mean.get(ci), is = save_invstd.get(ci), wc = cs.affine ? w.get(ci) : 1.0;
      double sg = 0, sgx = 0;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t i = 0; i < hw; ++i) {
          sg += gy.get(at(ni, ci, i));
          sgx += gy.get(at(ni, ci, i)) * (x.get(at(ni, ci, i)) - m) * is;
        }
      ref_gw[ci] = sgx, ref_gb[ci] = sg;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t i = 0; i < hw; ++i) {
          const double xhat = (x.get(at(ni, ci, i)) - m) * is;
          ref_gx[at(ni, ci, i)] = is * wc * (gy.get(at(ni, ci, i)) - sg / count - xhat * sgx / count);
        }
    }
    gx.fill(NAN), gw.fill(NAN), gb.fill(NAN);
    BatchNormArgs bw;
    bw.input = x.ref(), bw.grad_output = gy.ref(), bw.grad_input = gx.ref();
    if (cs.affine) bw.weight = w.ref();
    bw.save_mean = save_mean.ref(), bw.save_invstd = save_invstd.ref();
    bw.grad_weight = gw.ref(), bw.grad_bias = gb.ref();
    k.batch_norm_backward(bw);
    expect_close(gx, ref_gx, normalized(gx.dtype), "grad_x");
    expect_close(gw, ref_gw, normalized(gw.dtype), "grad_weight");
    expect_close(gb, ref_gb, normalized(gb.dtype), "grad_bias");
    // Each output is optional: grad_x alone leaves the parameter gradients untouched.
    gw.fill(7);
    bw.grad_weight = TensorRef{}, bw.grad_bias = TensorRef{};
    k.batch_norm_backward(bw);
    expect_close(gx, ref_gx, normalized(gx.dtype), "grad_x alone");
    EXPECT_EQ(gw.get(0), 7.0);
  }
}

class BatchNormParity : public ::testing::TestWithParam<DType> {};

TEST_P(BatchNormParity, MatchesFp64Reference) {
  for (const Case& c : kCases) run_case(c, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchNormParity, ::testing::Values(DType::F32, DType::F64, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// Every element's bytes equal (so -0 vs +0 and NaN payloads count).
void expect_same_bits(const HostTensor& got, const HostTensor& want, const char* what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const size_t size = dtype_size(got.dtype);
  const auto* g = reinterpret_cast<const unsigned char*>(got.storage.data());
  const auto* w = reinterpret_cast<const unsigned char*>(want.storage.data());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(g + i * size, w + i * size, size) != 0) differ += 1, first = first < 0 ? i : first;
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << got.numel() << " elements differ, the first at " << first
                       << ": " << (first < 0 ? 0 : got.get(first)) << " vs " << (first < 0 ? 0 : want.get(first));
}

// A fused activation against batch_norm, then the activation's own kernels (ReLU: unary Relu, and
// binary ReluBackward on the ReLU's output; GELU: unary Gelu, and binary GeluBackward on its input,
// batch norm's y), then batch_norm_backward: the same bits everywhere, with weights of both signs
// (the ReLU's backward mask is a threshold on x whose side follows the sign). `kink` puts a third
// of each channel exactly on its mean, zero weights among them, and biases on either side of the
// values that round to zero in half types, so y lands on, inside and just outside that band.
void run_fused_case(const Case& cs, DType dtype, BatchNormActivation act, bool kink) {
  const bool relu = act == BatchNormActivation::Relu;
  SCOPED_TRACE(describe(cs, dtype) + (relu ? " relu" : " gelu") + (kink ? " kink" : ""));
  const DType sd = dtype == DType::F64 ? DType::F64 : DType::F32;
  const int64_t c = cs.shape[1];
  std::mt19937 rng(11);
  HostTensor x(dtype, cs.shape), gy(dtype, cs.shape);
  HostTensor w(sd, {c}), b(sd, {c});
  x.fill_random(rng, cs.mean - cs.spread, cs.mean + cs.spread), gy.fill_random(rng, -1.0, 1.0);
  w.fill_random(rng, -1.5, 1.5), b.fill_random(rng, -0.5, 0.5);
  if (kink) {
    const double weights[] = {1.0, -1.0, 0.5, 0.0, -2.0, 1.5, 0.25};
    for (int64_t i = 0; i < c; ++i) w.set(i, weights[i % std::size(weights)]);
    // Values mean - 1, mean, mean + 1 in turn: the mean is exact, so y = bias where x = mean.
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, cs.mean + static_cast<double>(i % 3) - 1.0);
    const double biases[] = {0.0, 0x1p-26, -0x1p-26, 0x1p-25, 0x1p-24, -0x1p-24, 0x1p-135, 0x1p-134, 0x1p-133, -0x1p-133};
    for (int64_t i = 0; i < c; ++i) b.set(i, biases[i % std::size(biases)]);
  }
  Kernels& k = kernels_for(Device::cpu());
  auto forward = [&](bool fused, HostTensor& y, HostTensor& mean, HostTensor& invstd, HostTensor& rm, HostTensor& rv,
                     HostTensor& coef) {
    BatchNormArgs args;
    args.input = x.ref(), args.output = y.ref(), args.weight = w.ref(), args.bias = b.ref();
    args.running_mean = rm.ref(), args.running_var = rv.ref();
    args.save_mean = mean.ref(), args.save_invstd = invstd.ref();
    if (fused) args.activation = act, args.activation_coef = coef.ref();
    k.batch_norm_forward(args);
  };
  HostTensor y(dtype, cs.shape), z(dtype, cs.shape), fused(dtype, cs.shape), coef(sd, {4, c});
  HostTensor mean(sd, {c}), invstd(sd, {c}), rm(sd, {c}), rv(sd, {c});
  HostTensor fused_mean(sd, {c}), fused_invstd(sd, {c}), fused_rm(sd, {c}), fused_rv(sd, {c});
  rm.fill(0.25), rv.fill(2.0), fused_rm.fill(0.25), fused_rv.fill(2.0);
  forward(false, y, mean, invstd, rm, rv, coef);
  k.unary(relu ? UnaryKind::Relu : UnaryKind::Gelu, y.ref(), z.ref());
  forward(true, fused, fused_mean, fused_invstd, fused_rm, fused_rv, coef);
  expect_same_bits(fused, z, "forward");
  expect_same_bits(fused_mean, mean, "save_mean");
  expect_same_bits(fused_invstd, invstd, "save_invstd");
  expect_same_bits(fused_rm, rm, "running_mean");
  expect_same_bits(fused_rv, rv, "running_var");

  HostTensor g_act(dtype, cs.shape), gx(dtype, cs.shape), gw(sd, {c}), gb(sd, {c});
  HostTensor fused_gx(dtype, cs.shape), fused_gw(sd, {c}), fused_gb(sd, {c});
  if (relu) {
    k.binary(BinaryKind::ReluBackward, gy.ref(), z.ref(), g_act.ref());
  } else {
    k.binary(BinaryKind::GeluBackward, gy.ref(), y.ref(), g_act.ref());
  }
  auto backward = [&](bool fused, const HostTensor& grad, HostTensor& gxo, HostTensor& gwo, HostTensor& gbo) {
    BatchNormArgs bw;
    bw.input = x.ref(), bw.grad_output = const_cast<HostTensor&>(grad).ref(), bw.weight = w.ref();
    bw.save_mean = mean.ref(), bw.save_invstd = invstd.ref();
    bw.grad_input = gxo.ref(), bw.grad_weight = gwo.ref(), bw.grad_bias = gbo.ref();
    if (fused) bw.activation = act, bw.activation_coef = coef.ref();
    k.batch_norm_backward(bw);
  };
  backward(false, g_act, gx, gw, gb);
  backward(true, gy, fused_gx, fused_gw, fused_gb);
  expect_same_bits(fused_gx, gx, "grad_input");
  expect_same_bits(fused_gw, gw, "grad_weight");
  expect_same_bits(fused_gb, gb, "grad_bias");
}

TEST_P(BatchNormParity, FusedReluIsTheSeparateReluBitForBit) {
  for (const Case& c : kCases) {
    if (c.shape.size() != 4) continue;  // the fused ReLU follows BatchNorm2d
    run_fused_case(c, GetParam(), BatchNormActivation::Relu, false);
    run_fused_case(c, GetParam(), BatchNormActivation::Relu, true);
  }
}

TEST_P(BatchNormParity, FusedGeluIsTheSeparateGeluBitForBit) {
  if (GetParam() == DType::F64) GTEST_SKIP() << "a fused GELU takes fp32 and half inputs (RejectsBadArguments)";
  for (const Case& c : kCases) {
    if (c.shape.size() != 4) continue;
    run_fused_case(c, GetParam(), BatchNormActivation::Gelu, false);
    run_fused_case(c, GetParam(), BatchNormActivation::Gelu, true);
  }
}

// The band the fused ReLU treats as zero is exactly what rounds to zero in each half type.
TEST(BatchNorm, ReluZeroBandIsWhatRoundsToZero) {
  const std::pair<DType, float> bands[] = {{DType::F16, 0x1p-25f}, {DType::BF16, 0x1p-134f}};
  for (const auto& [dtype, band] : bands) {
    HostTensor t(dtype, {4});
    const float values[] = {band, -band, std::nextafter(band, 1.0f), -std::nextafter(band, 1.0f)};
    HostTensor f(DType::F32, {4});
    for (int i = 0; i < 4; ++i) f.set(i, values[i]);
    kernels_for(Device::cpu()).cast(f.ref(), t.ref());
    EXPECT_EQ(t.get(0), 0.0) << dtype;
    EXPECT_EQ(t.get(1), 0.0) << dtype;
    EXPECT_GT(t.get(2), 0.0) << dtype;
    EXPECT_LT(t.get(3), 0.0) << dtype;
  }
}

// An empty batch (N, H or W of 0) has nothing to normalise: the forward and the backward return,
// the parameter gradients become 0 and the running statistics stay (once a SIGFPE at H = 0).
TEST(BatchNorm, EmptyInputsRunAndZeroTheParameterGradients) {
  Kernels& k = kernels_for(Device::cpu());
  for (const Shape& shape : {Shape{0, 3}, Shape{0, 3, 4, 4}, Shape{0, 3, 10, 12}, Shape{2, 3, 0, 4}, Shape{2, 3, 4, 0}}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(describe(Case{"empty", shape, true, 0.0, 1.0}, dtype));
      HostTensor x(dtype, shape), y(dtype, shape), gy(dtype, shape), gx(dtype, shape);
      HostTensor w(DType::F32, {3}), rm(DType::F32, {3}), rv(DType::F32, {3});
      HostTensor save_mean(DType::F32, {3}), save_invstd(DType::F32, {3}), gw(DType::F32, {3}), gb(DType::F32, {3});
      for (int64_t c = 0; c < 3; ++c) {
        w.set(c, 1.0), rm.set(c, 0.25), rv.set(c, 2.0), save_mean.set(c, 0.1), save_invstd.set(c, 1.0);
        gw.set(c, 7.0), gb.set(c, 7.0);
      }
      BatchNormArgs eval;
      eval.input = x.ref(), eval.output = y.ref(), eval.weight = w.ref(), eval.mode = BatchNormMode::Eval;
      eval.running_mean = rm.ref(), eval.running_var = rv.ref();
      EXPECT_NO_THROW(k.batch_norm_forward(eval));
      BatchNormArgs back;
      back.input = x.ref(), back.grad_output = gy.ref(), back.grad_input = gx.ref(), back.weight = w.ref();
      back.save_mean = save_mean.ref(), back.save_invstd = save_invstd.ref();
      back.grad_weight = gw.ref(), back.grad_bias = gb.ref();
      EXPECT_NO_THROW(k.batch_norm_backward(back));
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(gw.get(c), 0.0);
        EXPECT_EQ(gb.get(c), 0.0);
        EXPECT_EQ(rm.get(c), 0.25);
        EXPECT_EQ(rv.get(c), 2.0);
      }
    }
  }
}

TEST(BatchNorm, RejectsBadArguments) {
  Kernels& k = kernels_for(Device::cpu());
  HostTensor x(DType::F16, {4, 3, 2, 2}), y(DType::F16, {4, 3, 2, 2}), w16(DType::F16, {3}), w4(DType::F32, {4});
  HostTensor x3(DType::F32, {4, 3, 2}), one(DType::F32, {1, 3}), y1(DType::F32, {1, 3});
  BatchNormArgs args;
  args.input = x.ref(), args.output = y.ref();
  EXPECT_NO_THROW(k.batch_norm_forward(args));
  args.weight = w16.ref();
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // parameters stay fp32 for half input
  args.weight = w4.ref();
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // not [C]
  args.weight = TensorRef{};
  args.input = x3.ref();
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // rank 3
  args.input = one.ref(), args.output = y1.ref();
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // one value per channel in training
  args.mode = BatchNormMode::Eval;
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // eval without running statistics
  HostTensor coef(DType::F32, {4, 3}), coef_short(DType::F32, {3, 3});
  args = BatchNormArgs{};
  args.input = x.ref(), args.output = y.ref(), args.activation = BatchNormActivation::Relu;
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // a fused ReLU without activation_coef
  args.activation_coef = coef_short.ref();
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // activation_coef not [4, C]
  args.activation_coef = coef.ref();
  EXPECT_NO_THROW(k.batch_norm_forward(args));
  args.activation = BatchNormActivation::Gelu;
  EXPECT_NO_THROW(k.batch_norm_forward(args));
  args.mode = BatchNormMode::Eval;
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // fused GELU in eval mode
  args.activation = BatchNormActivation::Relu;
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // fused ReLU in eval mode
  HostTensor x64(DType::F64, {4, 3, 2, 2}), y64(DType::F64, {4, 3, 2, 2}), coef64(DType::F64, {4, 3});
  args = BatchNormArgs{};
  args.input = x64.ref(), args.output = y64.ref(), args.activation_coef = coef64.ref();
  args.activation = BatchNormActivation::Relu;
  EXPECT_NO_THROW(k.batch_norm_forward(args));
  args.activation = BatchNormActivation::Gelu;
  EXPECT_THROW(k.batch_norm_forward(args), Error);  // fp64: gelu after batch_norm instead
}

}  // namespace
}  // namespace demi::backend

// Google Benchmark timings of the CPU backend's GEMM and conv2d (backends/cpu), next to Eigen's own
// GEMM with the same threads, at the sizes docs/BENCHMARKS.md reports (SmallCNN at batch 128).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

// A host buffer of `numel` elements of `dtype`: floating ones filled with small random values.
struct Buffer {
  DType dtype;
  Shape shape;
  std::vector<double> storage;

  Buffer(DType t, Shape s) : dtype(t), shape(std::move(s)), storage((shape_numel(shape) * dtype_size(t) + 7) / 8 + 1) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int64_t n = shape_numel(shape);
    void* p = storage.data();
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng);
      switch (dtype) {
        case DType::F32: static_cast<float*>(p)[i] = v; break;
        case DType::F16: static_cast<Half*>(p)[i] = Half(v); break;
        case DType::BF16: static_cast<BFloat16*>(p)[i] = BFloat16(v); break;
        case DType::F64: static_cast<double*>(p)[i] = v; break;
        default: break;  // integer buffers (max-pool indices) stay zero
      }
    }
  }
  TensorRef ref() { return TensorRef{storage.data(), shape, dtype}; }
};

// With --benchmark_repetitions, "min" of the time and "max" of GFLOP/s are the runs least disturbed
// by other processes on a shared machine.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void set_gflops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
}

// C = A B (layout 0), A B^T (1: Linear's forward multiplies by its weight) or A^T B (2: Linear's
// weight gradient, grad_y^T x), m x n x k, through CpuKernels::gemm; scripts/bench-gemm-vs-pytorch
// times torch.matmul on the layout 0 and 1 shapes.
void BM_GemmDemi(benchmark::State& state, DType dtype) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), batch = state.range(4);
  const bool tb = state.range(3) == 1, ta = state.range(3) == 2;
  Buffer a(dtype, ta ? Shape{batch, k, m} : Shape{batch, m, k}), b(dtype, tb ? Shape{batch, n, k} : Shape{batch, k, n}),
      c(dtype, {batch, m, n});
  GemmArgs args;
  args.a = a.ref(), args.b = b.ref(), args.c = c.ref();
  args.m = m, args.n = n, args.k = k, args.batch = batch;
  args.stride_a = m * k, args.stride_b = k * n, args.stride_c = m * n;
  args.trans_a = ta ? Transpose::Yes : Transpose::No;
  args.trans_b = tb ? Transpose::Yes : Transpose::No;
  Kernels& kernels = kernels_for(Device::cpu());
  for (auto _ : state) {
    kernels.gemm(args);
    benchmark::DoNotOptimize(c.storage.data());
  }
  set_gflops(state, 2.0 * m * n * k * batch);
}

// Squares, then Linear's forward at batch 128 (1024 -> 1024), a transformer MLP's first layer
// (2048 tokens, 768 -> 3072), attention's scores (512 products of 64 x 64 x 64, B^T), a batch of
// tiny products, and CCT-7's in-projection at batch 128 (32768 tokens, 256 -> 768) in its three
// products: forward, the input's gradient and the weight's.
void gemm_shapes(benchmark::internal::Benchmark* b, bool all) {
  b->ArgNames({"m", "n", "k", "layout", "batch"});
  for (const int64_t n : {256, 512, 1024, 2048}) {
    if (all || n == 1024) b->Args({n, n, n, 0, 1});
  }
  if (all) b->Args({128, 1024, 1024, 1, 1})->Args({2048, 3072, 768, 1, 1})->Args({64, 64, 64, 1, 512})->Args({8, 8, 8, 0, 4096});
  b->Args({32768, 768, 256, 1, 1})->Args({32768, 256, 768, 0, 1})->Args({768, 256, 32768, 2, 1});
}

// Eigen alone: a plain column-major MatrixXf product, parallelised by Eigen's own OpenMP.
void BM_GemmEigen(benchmark::State& state) {
  const Eigen::Index n = state.range(0);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  set_gflops(state, 2.0 * n * n * n);
  state.counters["eigen_threads"] = Eigen::nbThreads();
}

// The level's bf16 tile alone, one thread, on operands that stay in L1 (k = 256): the rate the
// convolutions' GEMMs would reach without their packing and memory traffic (GFLOP/s per core).
void BM_Bf16TileInCache(benchmark::State& state) {
  namespace isa = demi::backend::cpu::isa;
  const isa::Table& level = isa::active();
  const isa::Bf16Gemm& t = level.bf16;
  if (!t.tile) {
    state.SkipWithError((std::string("level ") + level.name + " has no bf16 tile").c_str());
    return;
  }
  if (level.bf16_route == isa::Bf16Route::Widen) {
    state.SkipWithError((std::string("level ") + level.name +
                         " widens bf16 on this CPU; DEMI_CPU_BF16_ROUTE=everything measures its tile anyway")
                            .c_str());
    return;
  }
  const int64_t kp = 256;
  std::vector<uint16_t> a(t.mr * kp, 0x3f80), b(kp / 2 * 2 * t.nr, 0x3f80);  // bf16 1.0
  std::vector<float> c(t.mr * t.nr);
  const isa::Bf16TileArgs args{a.data(), kp, b.data(), 2 * t.nr, c.data(), t.nr, kp, t.mr, t.nr,
                               nullptr, false, 1, nullptr, nullptr};
  if (t.prepare) t.prepare();
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i) t.tile(args);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(100 * 2.0 * t.mr * t.nr * kp / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The level's fp32 tile alone, the same way (k = 128, the GEMMs' depth block).
void BM_F32TileInCache(benchmark::State& state) {
  namespace isa = demi::backend::cpu::isa;
  const isa::F32Gemm& t = isa::active().gemm;
  const int64_t k = 128;
  std::vector<float> a(t.mr * k, 1.0f), b(k * t.nr, 1.0f), c(t.mr * t.nr);
  const isa::F32TileArgs args{a.data(), b.data(), t.nr, c.data(), t.nr, k, t.mr, t.nr, nullptr, state.range(0) != 0};
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i) t.tile(args);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(100 * 2.0 * t.mr * t.nr * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The level's dot tile (packed_gemm::gemm_nt) on backward-weight's Winograd products, one thread:
// the 16 points of one group's C (m x n) += V (m x k) Z^T with k = 256 tiles, as SmallCNN's 32- and
// 64-channel layers run them (V and Z, 1-4 MiB, from L2), and one 4 x 4 block at k = 1024 in L1.
// Rows 64-byte aligned, as the convolutions' scratch is (unaligned rows cost a fifth).
void BM_F32DotProducts(benchmark::State& state) {
  namespace packed_gemm = demi::backend::cpu::packed_gemm;
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), points = state.range(3);
  std::vector<float> a_buf(points * m * k + 16, 0.5f), b_buf(points * n * k + 16, 0.25f), c(points * m * n);
  auto aligned = [](std::vector<float>& v) {
    const auto at = reinterpret_cast<uintptr_t>(v.data()) % 64;
    return v.data() + (at ? (64 - at) / sizeof(float) : 0);
  };
  const float* a = aligned(a_buf);
  const float* b = aligned(b_buf);
  for (auto _ : state) {
    for (int64_t p = 0; p < points; ++p) {
      packed_gemm::gemm_nt(a + p * m * k, k, m, b + p * n * k, k, n, k, c.data() + p * m * n, n, packed_gemm::Accumulate::Yes);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(points * 2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_F32TileInCache)->Arg(0)->Arg(1)->ComputeStatistics("max", max_of)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_F32DotProducts)->Args({32, 32, 256, 16})->Args({64, 64, 256, 16})->Args({4, 4, 1024, 1})->ComputeStatistics("max", max_of)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Bf16TileInCache)->ComputeStatistics("max", max_of)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmEigen)->Arg(1024)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GemmDemi, f32, DType::F32)->Apply([](auto* b) { gemm_shapes(b, true); })->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GemmDemi, f16, DType::F16)->Apply([](auto* b) { gemm_shapes(b, false); })->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GemmDemi, bf16, DType::BF16)->Apply([](auto* b) { gemm_shapes(b, false); })->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

// SmallCNN's and AirNet's 3x3 convolutions (padding 1, stride 1) at batch 128.
struct ConvShape {
  int64_t c, o, hw;
};
constexpr ConvShape kSmallCnn[] = {{3, 32, 32}, {32, 32, 32}, {32, 64, 16}, {64, 64, 16}, {64, 128, 8}};
constexpr ConvShape kAirNet[] = {{24, 64, 31}, {64, 64, 15}, {64, 256, 15}, {256, 256, 7}, {256, 256, 7}, {256, 256, 3}};
constexpr int64_t kBatch = 128;

enum class Pass { Forward, BackwardData, BackwardWeight };

// Without a bias, as in both nets (their convolutions feed a batch norm): a bias adds its sum over
// grad_y to every backward-weight pass.
struct ConvBuffers {
  Buffer x, w, y;
  Conv2dArgs args;
  ConvBuffers(const ConvShape& s, DType dtype)
      : x(dtype, {kBatch, s.c, s.hw, s.hw}), w(dtype, {s.o, s.c, 3, 3}), y(dtype, {kBatch, s.o, s.hw, s.hw}) {
    args.input = x.ref(), args.weight = w.ref(), args.output = y.ref();
    args.pad_h = args.pad_w = 1;
  }
  double flops() const { return 2.0 * kBatch * args.weight.numel() * args.output.shape[2] * args.output.shape[3]; }
  void run(Kernels& k, Pass pass) {
    switch (pass) {
      case Pass::Forward: k.conv2d_forward(args); break;
      case Pass::BackwardData: k.conv2d_backward_data(args); break;
      case Pass::BackwardWeight: k.conv2d_backward_weight(args); break;
    }
  }
};

void BM_ConvLayer(benchmark::State& state, DType dtype, Pass pass, const ConvShape& shape) {
  ConvBuffers conv(shape, dtype);
  Kernels& k = kernels_for(Device::cpu());
  for (auto _ : state) {
    conv.run(k, pass);
    benchmark::ClobberMemory();
  }
  set_gflops(state, conv.flops());
}

// A whole net's convolutions: every layer, forward and both backward passes, per iteration.
template <size_t N>
void BM_ConvNet(benchmark::State& state, DType dtype, const ConvShape (&net)[N]) {
  std::vector<ConvBuffers> layers;
  layers.reserve(N);
  double flops = 0;
  for (const ConvShape& s : net) {
    layers.emplace_back(s, dtype);
    flops += 3 * layers.back().flops();
  }
  Kernels& k = kernels_for(Device::cpu());
  for (auto _ : state) {
    for (ConvBuffers& l : layers) {
      l.run(k, Pass::Forward);
      l.run(k, Pass::BackwardData);
      l.run(k, Pass::BackwardWeight);
    }
    benchmark::ClobberMemory();
  }
  set_gflops(state, flops);
}

void BM_Conv(benchmark::State& state, DType dtype, Pass pass) {  // SmallCNN's layer range(0)
  BM_ConvLayer(state, dtype, pass, kSmallCnn[state.range(0)]);
}
void BM_ConvAir(benchmark::State& state, DType dtype, Pass pass) {  // AirNet's layer range(0)
  BM_ConvLayer(state, dtype, pass, kAirNet[state.range(0)]);
}
void BM_ConvSmallCnn(benchmark::State& state, DType dtype) { BM_ConvNet(state, dtype, kSmallCnn); }
void BM_ConvAirNet(benchmark::State& state, DType dtype) { BM_ConvNet(state, dtype, kAirNet); }

void air_conv_args(benchmark::internal::Benchmark* b) {
  b->ArgName("layer")->DenseRange(0, std::size(kAirNet) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
}
void conv_args(benchmark::internal::Benchmark* b) {
  b->ArgName("layer")->DenseRange(0, std::size(kSmallCnn) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_Conv, f32_forward, DType::F32, Pass::Forward)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, f32_backward_data, DType::F32, Pass::BackwardData)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, f32_backward_weight, DType::F32, Pass::BackwardWeight)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, f16_forward, DType::F16, Pass::Forward)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, f16_backward_data, DType::F16, Pass::BackwardData)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, f16_backward_weight, DType::F16, Pass::BackwardWeight)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, bf16_forward, DType::BF16, Pass::Forward)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, bf16_backward_data, DType::BF16, Pass::BackwardData)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_Conv, bf16_backward_weight, DType::BF16, Pass::BackwardWeight)->Apply(conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, f32_forward, DType::F32, Pass::Forward)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, f32_backward_data, DType::F32, Pass::BackwardData)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, f32_backward_weight, DType::F32, Pass::BackwardWeight)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, bf16_forward, DType::BF16, Pass::Forward)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, bf16_backward_data, DType::BF16, Pass::BackwardData)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvAir, bf16_backward_weight, DType::BF16, Pass::BackwardWeight)->Apply(air_conv_args);
BENCHMARK_CAPTURE(BM_ConvSmallCnn, f32, DType::F32)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConvSmallCnn, f16, DType::F16)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConvSmallCnn, bf16, DType::BF16)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConvAirNet, f32, DType::F32)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConvAirNet, bf16, DType::BF16)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

// The 2x2 max-pools at batch 128 (inputs [128, C, HW, HW]), forward and backward: GB/s of the input
// (forward reads it, backward writes its gradient). The first three are SmallCNN's, the rest
// AirNet's, whose planes have odd sizes.
constexpr ConvShape kPools[] = {{32, 32, 32}, {64, 64, 16}, {128, 128, 8}, {64, 64, 31}, {256, 256, 15}, {256, 256, 7}};

void BM_MaxPool(benchmark::State& state, DType dtype, Pass pass) {
  const ConvShape& s = kPools[state.range(0)];
  Buffer x(dtype, {kBatch, s.c, s.hw, s.hw}), y(dtype, {kBatch, s.c, s.hw / 2, s.hw / 2});
  Buffer idx(DType::U8, {kBatch, s.c, s.hw / 2, s.hw / 2});
  Pool2dArgs args;
  args.kind = PoolKind::Max;
  args.kernel_h = args.kernel_w = args.stride_h = args.stride_w = 2;
  args.input = x.ref(), args.output = y.ref(), args.indices = idx.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.pool2d_forward(args);  // the indices backward reads
  for (auto _ : state) {
    if (pass == Pass::Forward) {
      k.pool2d_forward(args);
    } else {
      k.pool2d_backward(args);  // grad_y = y's buffer, grad_x = x's
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(double(x.ref().numel()) * dtype_size(dtype) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_MaxPool, f32, DType::F32, Pass::Forward)->ArgName("pool")->DenseRange(0, std::size(kPools) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPool, bf16, DType::BF16, Pass::Forward)->ArgName("pool")->DenseRange(0, std::size(kPools) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPool, f32_backward, DType::F32, Pass::BackwardData)->ArgName("pool")->DenseRange(0, std::size(kPools) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPool, bf16_backward, DType::BF16, Pass::BackwardData)->ArgName("pool")->DenseRange(0, std::size(kPools) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

// The batch norms at batch 128 ([128, C, HW, HW]), training forward and backward (grad_input,
// grad_weight, grad_bias): GB/s of x (and grad_y) read once. SmallCNN's first (the max-pools'
// inputs), then AirNet's (after its pools: two each). *_relu: with the ReLU fused (SmallCNN's);
// *_gelu: with the GELU fused (AirNet's).
constexpr ConvShape kBatchNorms[] = {{32, 32, 32}, {64, 64, 16}, {128, 128, 8}, {64, 64, 15}, {256, 256, 7}, {256, 256, 3}};
enum class BnPass { Forward, Backward };

void BM_BatchNorm(benchmark::State& state, DType dtype, BnPass pass,
                  BatchNormActivation activation = BatchNormActivation::None) {
  const ConvShape& s = kBatchNorms[state.range(0)];
  const Shape shape{kBatch, s.c, s.hw, s.hw};
  Buffer x(dtype, shape), y(dtype, shape), gy(dtype, shape), gx(dtype, shape);
  Buffer weight(DType::F32, {s.c}), bias(DType::F32, {s.c}), mean(DType::F32, {s.c}), invstd(DType::F32, {s.c});
  Buffer rmean(DType::F32, {s.c}), rvar(DType::F32, {s.c}), gw(DType::F32, {s.c}), gb(DType::F32, {s.c});
  BatchNormArgs args;
  args.input = x.ref(), args.output = y.ref(), args.weight = weight.ref(), args.bias = bias.ref();
  args.running_mean = rmean.ref(), args.running_var = rvar.ref();
  args.save_mean = mean.ref(), args.save_invstd = invstd.ref();
  args.grad_output = gy.ref(), args.grad_input = gx.ref(), args.grad_weight = gw.ref(), args.grad_bias = gb.ref();
  Buffer coef(DType::F32, {4, s.c});
  if (activation != BatchNormActivation::None) args.activation = activation, args.activation_coef = coef.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.batch_norm_forward(args);  // the saved statistics backward reads
  for (auto _ : state) {
    if (pass == BnPass::Forward) {
      k.batch_norm_forward(args);
    } else {
      k.batch_norm_backward(args);
    }
    benchmark::ClobberMemory();
  }
  const double reads = pass == BnPass::Forward ? 1.0 : 2.0;
  state.counters["GB/s"] = benchmark::Counter(reads * double(x.ref().numel()) * dtype_size(dtype) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_BatchNorm, f32_forward, DType::F32, BnPass::Forward)->ArgName("layer")->DenseRange(0, std::size(kBatchNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f32_backward, DType::F32, BnPass::Backward)->ArgName("layer")->DenseRange(0, std::size(kBatchNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_forward, DType::BF16, BnPass::Forward)->ArgName("layer")->DenseRange(0, std::size(kBatchNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_backward, DType::BF16, BnPass::Backward)->ArgName("layer")->DenseRange(0, std::size(kBatchNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f32_forward_relu, DType::F32, BnPass::Forward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f32_backward_relu, DType::F32, BnPass::Backward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_forward_relu, DType::BF16, BnPass::Forward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_backward_relu, DType::BF16, BnPass::Backward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f16_forward_relu, DType::F16, BnPass::Forward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f16_backward_relu, DType::F16, BnPass::Backward, BatchNormActivation::Relu)->ArgName("layer")->DenseRange(0, 2)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f32_forward_gelu, DType::F32, BnPass::Forward, BatchNormActivation::Gelu)->ArgName("layer")->DenseRange(3, 5)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, f32_backward_gelu, DType::F32, BnPass::Backward, BatchNormActivation::Gelu)->ArgName("layer")->DenseRange(3, 5)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_forward_gelu, DType::BF16, BnPass::Forward, BatchNormActivation::Gelu)->ArgName("layer")->DenseRange(3, 5)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchNorm, bf16_backward_gelu, DType::BF16, BnPass::Backward, BatchNormActivation::Gelu)->ArgName("layer")->DenseRange(3, 5)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

// AirNet's seven GELUs at batch 128 (its stem's output, then after each batch norm), forward
// (y = x Phi(x)) and backward (grad_x from grad_y and x) per iteration: GB/s of x read once.
constexpr ConvShape kAirNetGelus[] = {{24, 24, 31}, {64, 64, 15}, {64, 64, 15}, {256, 256, 7},
                                      {256, 256, 7}, {256, 256, 3}, {256, 256, 3}};

void BM_GeluAirNet(benchmark::State& state, DType dtype, Pass pass) {
  std::vector<Buffer> x, y, gy;
  double bytes = 0;
  for (const ConvShape& s : kAirNetGelus) {
    const Shape shape{kBatch, s.c, s.hw, s.hw};
    x.emplace_back(dtype, shape), y.emplace_back(dtype, shape), gy.emplace_back(dtype, shape);
    bytes += double(shape_numel(shape)) * dtype_size(dtype);
  }
  Kernels& k = kernels_for(Device::cpu());
  for (auto _ : state) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (pass == Pass::Forward) {
        k.unary(UnaryKind::Gelu, x[i].ref(), y[i].ref());
      } else {
        k.binary(BinaryKind::GeluBackward, gy[i].ref(), x[i].ref(), y[i].ref());
      }
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_GeluAirNet, f32_forward, DType::F32, Pass::Forward)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeluAirNet, f32_backward, DType::F32, Pass::BackwardData)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeluAirNet, bf16_forward, DType::BF16, Pass::Forward)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeluAirNet, bf16_backward, DType::BF16, Pass::BackwardData)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

// scaled_dot_product_attention's kernels at CCT's shapes (batch 128, heads 2 or 4, L = S = 64 or
// 256, E = 64): forward and backward (grad_q, grad_k, grad_v) per iteration. GFLOP/s counts the
// seven L x S x E products (two forward, five backward) at 2 flops each.
void BM_Attention(benchmark::State& state, DType dtype) {
  const int64_t batch = state.range(0), heads = state.range(1), L = state.range(2), E = state.range(3);
  const Shape qkv{batch, heads, L, E}, stats{batch, heads, L};
  Buffer q(dtype, qkv), k(dtype, qkv), v(dtype, qkv), out(dtype, qkv), lse(DType::F32, stats);
  Buffer go(dtype, qkv), gq(dtype, qkv), gk(dtype, qkv), gv(dtype, qkv);
  AttentionArgs args;
  args.q = q.ref(), args.k = k.ref(), args.v = v.ref(), args.out = out.ref(), args.logsumexp = lse.ref();
  args.grad_out = go.ref(), args.grad_q = gq.ref(), args.grad_k = gk.ref(), args.grad_v = gv.ref();
  args.scale = 1.0 / std::sqrt(static_cast<double>(E));
  Kernels& kernels = kernels_for(Device::cpu());
  for (auto _ : state) {
    kernels.attention_forward(args);
    kernels.attention_backward(args);
    benchmark::ClobberMemory();
  }
  set_gflops(state, 14.0 * batch * heads * L * L * E);
}
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "heads", "L", "E"})->Args({128, 2, 64, 64})->Args({128, 4, 64, 64})->Args({128, 2, 256, 64})->Args({128, 4, 256, 64});
  b->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_Attention, f32, DType::F32)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, bf16, DType::BF16)->Apply(attention_shapes);

// The layer norms of CCT at batch 128 (tokens x channels rows of `channels`), forward (output, mean,
// rstd) or backward (grad_input, grad_weight, grad_bias), weight and bias fp32 (bf16 input: torch's
// mixed layer_norm): GB/s of x (and grad_y) read once.
struct LayerNormShape {
  int64_t tokens, channels;
};
constexpr LayerNormShape kLayerNorms[] = {{64, 128}, {64, 256}, {256, 128}, {256, 256}};

void BM_LayerNorm(benchmark::State& state, DType dtype, BnPass pass) {
  const LayerNormShape& s = kLayerNorms[state.range(0)];
  const int64_t rows = kBatch * s.tokens;
  Buffer x(dtype, {rows, s.channels}), y(dtype, {rows, s.channels}), gy(dtype, {rows, s.channels});
  Buffer gx(dtype, {rows, s.channels}), weight(DType::F32, {s.channels}), bias(DType::F32, {s.channels});
  Buffer gw(DType::F32, {s.channels}), gb(DType::F32, {s.channels}), mean(DType::F32, {rows}), rstd(DType::F32, {rows});
  LayerNormArgs args;
  args.input = x.ref(), args.output = y.ref(), args.weight = weight.ref(), args.bias = bias.ref();
  args.mean = mean.ref(), args.rstd = rstd.ref(), args.cols = s.channels;
  args.grad_output = gy.ref(), args.grad_input = gx.ref(), args.grad_weight = gw.ref(), args.grad_bias = gb.ref();
  Kernels& k = kernels_for(Device::cpu());
  k.layer_norm_forward(args);  // the saved statistics backward reads
  for (auto _ : state) {
    if (pass == BnPass::Forward) {
      k.layer_norm_forward(args);
    } else {
      k.layer_norm_backward(args);
    }
    benchmark::ClobberMemory();
  }
  const double reads = pass == BnPass::Forward ? 1.0 : 2.0;
  state.counters["GB/s"] = benchmark::Counter(reads * double(rows * s.channels) * dtype_size(dtype) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_LayerNorm, f32_forward, DType::F32, BnPass::Forward)->ArgName("shape")->DenseRange(0, std::size(kLayerNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LayerNorm, f32_backward, DType::F32, BnPass::Backward)->ArgName("shape")->DenseRange(0, std::size(kLayerNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LayerNorm, bf16_forward, DType::BF16, BnPass::Forward)->ArgName("shape")->DenseRange(0, std::size(kLayerNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LayerNorm, bf16_backward, DType::BF16, BnPass::Backward)->ArgName("shape")->DenseRange(0, std::size(kLayerNorms) - 1)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace demi::backend

int main(int argc, char** argv) {
  benchmark::AddCustomContext("cpu_isa", demi::backend::cpu_isa());  // the level the rows ran at
  benchmark::AddCustomContext("cpu_bf16_route", demi::backend::cpu_bf16_route());
  benchmark::AddCustomContext("cpu_tuning", demi::backend::cpu_tuning());  // the DEMI_* variables set
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

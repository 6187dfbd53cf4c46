// Pins backends/cuda/amp.cu: the multi-tensor unscale + inf/NaN check on cuda:0 against the CPU
// backend, bit for bit (one fp32 multiply, one rounding), over long mixed lists (several launches,
// tensors split across launches), in place and into fp32 buffers; found_inf set by one inf or NaN and
// never cleared; and update_scale traces (PyTorch's _amp_update_scale_) against hand values and the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

struct GradSpec {
  DType dtype;
  int64_t n;
  bool into_fp32;  // unscaled into a separate fp32 buffer rather than in place
};

// One unscale_check_finite call set up identically on both backends.
class UnscaleRun {
 public:
  UnscaleRun(const std::vector<GradSpec>& specs, unsigned seed) : specs_(specs) {
    for (size_t k = 0; k < specs.size(); ++k) {
      const GradSpec& s = specs[k];
      // Scaled gradients: large, within fp16's range.
      const double range = s.dtype == DType::F16 ? 3e4 : 1e6;
      in_host_.push_back(encode(uniform(static_cast<size_t>(s.n), -range, range, seed + static_cast<unsigned>(k)),
                                s.dtype));
      out_host_.push_back(s.into_fp32 ? std::vector<uint8_t>(static_cast<size_t>(s.n) * 4, 0) : std::vector<uint8_t>());
    }
  }

  // Element i of gradient k becomes `value` (an inf or NaN), on the host before upload.
  void poison(size_t k, int64_t i, double value) {
    const std::vector<uint8_t> bytes = encode({value}, specs_[k].dtype);
    std::copy(bytes.begin(), bytes.end(), in_host_[k].begin() + i * static_cast<int64_t>(bytes.size()));
  }

  // Runs both backends with found_inf starting at `found_inf`; returns {gpu found_inf, cpu found_inf}
  // and compares every output bit for bit.
  std::pair<float, float> run(float inv_scale, float found_inf, const std::string& what) {
    std::vector<std::unique_ptr<Buffer>> in_gpu, out_gpu;
    UnscaleArgs on_gpu, on_cpu;
    std::vector<std::vector<uint8_t>> in_cpu = in_host_, out_cpu = out_host_;
    for (size_t k = 0; k < specs_.size(); ++k) {
      const GradSpec& s = specs_[k];
      const Shape shape = {s.n};
      in_gpu.push_back(std::make_unique<Buffer>(gpu(), in_host_[k]));
      on_gpu.in.push_back(in_gpu.back()->ref(shape, s.dtype));
      on_cpu.in.push_back(TensorRef{in_cpu[k].data(), shape, s.dtype});
      if (s.into_fp32) {
        out_gpu.push_back(std::make_unique<Buffer>(gpu(), out_host_[k]));
        on_gpu.out.push_back(out_gpu.back()->ref(shape, DType::F32));
        on_cpu.out.push_back(TensorRef{out_cpu[k].data(), shape, DType::F32});
      } else {
        out_gpu.push_back(nullptr);
        on_gpu.out.push_back(on_gpu.in.back());
        on_cpu.out.push_back(on_cpu.in.back());
      }
    }
    const Buffer inv_gpu(gpu(), encode({inv_scale}, DType::F32));
    const Buffer found_gpu(gpu(), encode({found_inf}, DType::F32));
    float inv_cpu = inv_scale, found_cpu = found_inf;
    on_gpu.inv_scale = inv_gpu.ref({}, DType::F32);
    on_gpu.found_inf = found_gpu.ref({}, DType::F32);
    on_cpu.inv_scale = TensorRef{&inv_cpu, {}, DType::F32};
    on_cpu.found_inf = TensorRef{&found_cpu, {}, DType::F32};
    gpu().unscale_check_finite(on_gpu);
    cpu().unscale_check_finite(on_cpu);
    for (size_t k = 0; k < specs_.size(); ++k) {
      const GradSpec& s = specs_[k];
      std::ostringstream name;
      name << what << ": gradient " << k << " (" << s.dtype << " n=" << s.n
           << (s.into_fp32 ? " into fp32" : " in place") << ")";
      if (s.into_fp32) {
        expect_same(out_gpu[k]->read(), out_cpu[k], DType::F32, name.str());
        expect_same(in_gpu[k]->read(), in_host_[k], s.dtype, name.str() + " input untouched");
      } else {
        expect_same(in_gpu[k]->read(), in_cpu[k], s.dtype, name.str());
      }
    }
    return {static_cast<float>(decode(found_gpu.read(), DType::F32)[0]), found_cpu};
  }

 private:
  std::vector<GradSpec> specs_;
  std::vector<std::vector<uint8_t>> in_host_, out_host_;
};

// 100 gradients of 1..5000 elements in every dtype, half of the non-fp32 ones into fp32 buffers (and
// some fp32 ones into a separate fp32 buffer): more tensors than one launch's table holds.
std::vector<GradSpec> mixed_grads() {
  std::mt19937 gen(2024);
  std::uniform_int_distribution<int64_t> size(1, 5000);
  std::vector<GradSpec> specs;
  for (int k = 0; k < 100; ++k) {
    const DType dtype = kFloatDTypes[static_cast<size_t>(k) % kFloatDTypes.size()];
    const int64_t n = k == 0 ? 1 : k == 1 ? 5000 : size(gen);
    specs.push_back({dtype, n, (k / 4) % 2 == 1});
  }
  specs[10].n = 0;  // an empty gradient is skipped
  return specs;
}

TEST(CudaAmp, UnscaleManyMixedTensorsMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // 2^-16 is exact; 1/3000 rounds, so the product rounds too.
  for (const float inv_scale : {0x1p-16f, static_cast<float>(1.0 / 3000.0)}) {
    UnscaleRun grads(mixed_grads(), 7);
    const auto [gpu_found, cpu_found] = grads.run(inv_scale, 0.0f, "finite, inv_scale " + std::to_string(inv_scale));
    EXPECT_EQ(gpu_found, 0.0f);
    EXPECT_EQ(cpu_found, 0.0f);
  }
}

TEST(CudaAmp, OneInfOrNanInTheLastElementOfTensor77SetsFoundInf) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<GradSpec> specs = mixed_grads();
  // The 77th gradient (index 76, fp32) and its neighbours of the other dtypes, all in the second launch.
  for (const size_t k : {size_t{76}, size_t{77}, size_t{78}, size_t{79}}) {
    for (const double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::nan("")}) {
      UnscaleRun grads(specs, 11);
      grads.poison(k, specs[k].n - 1, bad);
      std::ostringstream what;
      what << bad << " at the end of gradient " << k << " (" << specs[k].dtype << ")";
      const auto [gpu_found, cpu_found] = grads.run(0x1p-16f, 0.0f, what.str());
      EXPECT_EQ(cpu_found, 1.0f) << what.str();
      EXPECT_EQ(gpu_found, 1.0f) << what.str() << " was missed";
    }
  }
}

TEST(CudaAmp, FoundInfIsNeverCleared) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  UnscaleRun grads(mixed_grads(), 13);
  const auto [gpu_found, cpu_found] = grads.run(0x1p-16f, 1.0f, "finite after an earlier inf");
  EXPECT_EQ(cpu_found, 1.0f);
  EXPECT_EQ(gpu_found, 1.0f);
}

TEST(CudaAmp, TensorsSplitAcrossLaunches) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // Millions of elements: more chunks than one launch's block table, so gradient 1 starts in one
  // launch and ends in the next; the inf is its very last element.
  const std::vector<GradSpec> specs = {{DType::F16, 5000000, true}, {DType::F32, 4000000, false},
                                       {DType::BF16, 3, false},     {DType::F64, 70001, true}};
  for (const bool poisoned : {false, true}) {
    UnscaleRun grads(specs, 17);
    if (poisoned) grads.poison(1, specs[1].n - 1, std::numeric_limits<double>::infinity());
    const auto [gpu_found, cpu_found] = grads.run(0x1p-10f, 0.0f, poisoned ? "inf at the end" : "finite");
    EXPECT_EQ(cpu_found, poisoned ? 1.0f : 0.0f);
    EXPECT_EQ(gpu_found, cpu_found);
  }
}

TEST(CudaAmp, UnscaleEmptyListAndBadArguments) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const Buffer inv(gpu(), encode({0.5}, DType::F32)), found(gpu(), encode({0.0}, DType::F32));
  const Buffer a(gpu(), encode({1, 2, 3, 4}, DType::F32)), b(gpu(), encode({1, 2, 3, 4}, DType::F64));
  UnscaleArgs args;
  args.inv_scale = inv.ref({}, DType::F32);
  args.found_inf = found.ref({}, DType::F32);
  EXPECT_NO_THROW(gpu().unscale_check_finite(args));  // nothing to do
  auto bad = [&](TensorRef in, TensorRef out) {
    UnscaleArgs x = args;
    x.in = {a.ref({4}, DType::F32), in};
    x.out = {a.ref({4}, DType::F32), out};
    return x;
  };
  EXPECT_THROW(gpu().unscale_check_finite(bad(a.ref({4}, DType::F32), a.ref({4}, DType::F16))), Error);
  EXPECT_THROW(gpu().unscale_check_finite(bad(b.ref({4}, DType::F64), a.ref({3}, DType::F32))), Error);
  EXPECT_THROW(gpu().unscale_check_finite(bad(b.ref({4}, DType::I64), b.ref({4}, DType::I64))), Error);
  // A rejected list leaves every gradient as it was, the valid first one included.
  EXPECT_EQ(decode(a.read(), DType::F32), (std::vector<double>{1, 2, 3, 4}));
  UnscaleArgs mismatched = args;
  mismatched.in = {a.ref({4}, DType::F32)};
  EXPECT_THROW(gpu().unscale_check_finite(mismatched), Error);
  UnscaleArgs wide_scale = bad(a.ref({4}, DType::F32), a.ref({4}, DType::F32));
  wide_scale.inv_scale = b.ref({}, DType::F64);
  EXPECT_THROW(gpu().unscale_check_finite(wide_scale), Error);
  // A valid call halves in place.
  UnscaleArgs valid = args;
  valid.in = {a.ref({4}, DType::F32)};
  valid.out = valid.in;
  gpu().unscale_check_finite(valid);
  EXPECT_EQ(decode(a.read(), DType::F32), (std::vector<double>{0.5, 1, 1.5, 2}));
  EXPECT_EQ(decode(found.read(), DType::F32)[0], 0.0);
}

// --- update_scale ------------------------------------------------------------------------------

// The scaler's state on both backends, stepped together.
class ScaleState {
 public:
  ScaleState(float scale, int64_t tracker)
      : scale_gpu_(gpu(), encode({scale}, DType::F32)),
        tracker_gpu_(gpu(), encode({static_cast<double>(tracker)}, DType::I64)),
        found_gpu_(gpu(), 4),
        scale_cpu_(scale),
        tracker_cpu_(tracker) {}

  void update(float found_inf, double growth_factor, double backoff_factor, int64_t growth_interval) {
    gpu().copy_from_host(&found_inf, found_gpu_.data(), 4);
    ScaleUpdateArgs on_gpu, on_cpu;
    for (ScaleUpdateArgs* a : {&on_gpu, &on_cpu}) {
      a->growth_factor = growth_factor;
      a->backoff_factor = backoff_factor;
      a->growth_interval = growth_interval;
    }
    on_gpu.scale = scale_gpu_.ref({}, DType::F32);
    on_gpu.growth_tracker = tracker_gpu_.ref({}, DType::I64);
    on_gpu.found_inf = found_gpu_.ref({}, DType::F32);
    found_cpu_ = found_inf;
    on_cpu.scale = TensorRef{&scale_cpu_, {}, DType::F32};
    on_cpu.growth_tracker = TensorRef{&tracker_cpu_, {}, DType::I64};
    on_cpu.found_inf = TensorRef{&found_cpu_, {}, DType::F32};
    gpu().update_scale(on_gpu);
    cpu().update_scale(on_cpu);
  }
  float gpu_scale() const {
    float s;
    gpu().copy_to_host(scale_gpu_.data(), &s, 4);
    return s;
  }
  int64_t gpu_tracker() const {
    int64_t t;
    gpu().copy_to_host(tracker_gpu_.data(), &t, 8);
    return t;
  }
  float cpu_scale() const { return scale_cpu_; }
  int64_t cpu_tracker() const { return tracker_cpu_; }

 private:
  Buffer scale_gpu_, tracker_gpu_, found_gpu_;
  float scale_cpu_;
  int64_t tracker_cpu_;
  float found_cpu_ = 0.0f;
};

TEST(CudaAmp, UpdateScaleFollowsTheIssueStory) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  struct Step {
    float found_inf;
    float want_scale;
    int64_t want_tracker;
  };
  const float inf = std::numeric_limits<float>::infinity();
  // init 65536, growth_interval 3: two overflows back off twice, three clean steps grow once, a NaN
  // (or a sum of flags from two optimizers, 2) counts as an overflow and resets the count.
  const std::vector<Step> story = {
      {inf, 32768, 0}, {1, 16384, 0},  {0, 16384, 1}, {0, 16384, 2}, {0, 32768, 0}, {0, 32768, 1},
      {std::nanf(""), 16384, 0},       {0, 16384, 1}, {2, 8192, 0},  {0, 8192, 1},  {0, 8192, 2},
      {0, 16384, 0},
  };
  ScaleState state(65536.0f, 0);
  for (size_t i = 0; i < story.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i) + " found_inf " + std::to_string(story[i].found_inf));
    state.update(story[i].found_inf, 2.0, 0.5, 3);
    EXPECT_EQ(state.cpu_scale(), story[i].want_scale);
    EXPECT_EQ(state.cpu_tracker(), story[i].want_tracker);
    EXPECT_EQ(state.gpu_scale(), story[i].want_scale);
    EXPECT_EQ(state.gpu_tracker(), story[i].want_tracker);
  }
}

TEST(CudaAmp, UpdateScaleRefusesToGrowIntoInf) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  ScaleState state(0x1p127f, 0);
  state.update(0.0f, 2.0, 0.5, 1);  // 2^128 is inf in fp32: keep the scale, restart the count
  EXPECT_EQ(state.gpu_scale(), 0x1p127f);
  EXPECT_EQ(state.gpu_tracker(), 0);
  EXPECT_EQ(state.cpu_scale(), 0x1p127f);
  EXPECT_EQ(state.cpu_tracker(), 0);
  state.update(0.0f, 1.5, 0.5, 1);  // 1.5 * 2^127 is finite: grows
  EXPECT_EQ(state.gpu_scale(), 1.5f * 0x1p127f);
  EXPECT_EQ(state.cpu_scale(), 1.5f * 0x1p127f);
}

TEST(CudaAmp, UpdateScaleOddFactorsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  // Factors that are not powers of two: the product is rounded once from double, on both sides.
  ScaleState state(1000.0f, 5);
  const std::vector<float> flags = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < flags.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    state.update(flags[i], 1.7, 0.3, 4);
    EXPECT_EQ(state.gpu_scale(), state.cpu_scale());
    EXPECT_EQ(state.gpu_tracker(), state.cpu_tracker());
  }
  // A tracker already past the interval grows at once; after the overflow at step 5, growth at step 9
  // and three clean steps since.
  EXPECT_EQ(state.cpu_tracker(), 3);
}

TEST(CudaAmp, UpdateScaleRejectsBadDTypes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  Buffer s(gpu(), 8), t(gpu(), 8), f(gpu(), 8);
  ScaleUpdateArgs args;
  args.scale = s.ref({}, DType::F64);
  args.growth_tracker = t.ref({}, DType::I64);
  args.found_inf = f.ref({}, DType::F32);
  EXPECT_THROW(gpu().update_scale(args), Error);
  args.scale = s.ref({}, DType::F32);
  args.growth_tracker = t.ref({}, DType::F32);
  EXPECT_THROW(gpu().update_scale(args), Error);
  args.growth_tracker = t.ref({}, DType::I64);
  args.found_inf = f.ref({2}, DType::F32);
  EXPECT_THROW(gpu().update_scale(args), Error);
}

}  // namespace
}  // namespace demi::backend

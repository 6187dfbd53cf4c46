// Pins backends/cuda/augment.cu against the CPU backend: DataLoader's batch (gather, crop with zero
// or reflect padding, flip, normalisation, cutout clipped at the border) bit for bit, in every output
// dtype and both memory formats.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/kernels.h"

namespace demi::backend {
namespace {

using namespace cuda_test;

constexpr int64_t kImages = 7, kRows = 13, kH = 9, kW = 11;

std::vector<uint8_t> random_images() {
  std::mt19937 gen(5);
  std::vector<uint8_t> v(static_cast<size_t>(kImages * 3 * kH * kW));
  for (uint8_t& x : v) x = static_cast<uint8_t>(gen() & 0xff);
  return v;
}

// A lut whose values need all of fp32's bits, so that a second rounding would show.
std::vector<uint8_t> lut_bytes() {
  std::vector<float> lut(3 * 256);
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c * 256 + v] = (static_cast<float>(v) / 255.0f - 0.3f * c) / 0.2471f;
  std::vector<uint8_t> bytes(lut.size() * sizeof(float));
  std::memcpy(bytes.data(), lut.data(), bytes.size());
  return bytes;
}

// Rows with offsets up to a side minus one, flips, cutout centres in and off the image's corners.
std::vector<uint8_t> random_plan(bool with_cutout) {
  std::mt19937 gen(11);
  std::vector<int64_t> plan;
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t src = static_cast<int64_t>(gen() % kImages);
    const int64_t dy = static_cast<int64_t>(gen() % (2 * kH - 1)) - (kH - 1);
    const int64_t dx = static_cast<int64_t>(gen() % (2 * kW - 1)) - (kW - 1);
    const int64_t flip = gen() & 1;
    const int64_t cy = with_cutout && r % 4 != 0 ? static_cast<int64_t>(gen() % kH) : -1;
    const int64_t cx = with_cutout && r % 4 != 0 ? static_cast<int64_t>(gen() % kW) : -1;
    plan.insert(plan.end(), {src, dy, dx, flip, cy, cx});
  }
  std::vector<uint8_t> bytes(plan.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), plan.data(), bytes.size());
  return bytes;
}

TEST(CudaAugment, MatchesCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << kNoDevice;
  const std::vector<uint8_t> images = random_images(), lut = lut_bytes();
  Buffer d_images(gpu(), images), d_lut(gpu(), lut);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (bool reflect : {false, true}) {
      for (int cutout : {0, 4, 9}) {
        for (bool channels_last : {false, true}) {
          const std::string what = std::string(dtype_name(dtype)) + (reflect ? " reflect" : " zeros") + " cutout " +
                                   std::to_string(cutout) + (channels_last ? " NHWC" : " NCHW");
          const std::vector<uint8_t> plan = random_plan(cutout > 0);
          std::vector<uint8_t> images_cpu = images, lut_cpu = lut, plan_cpu = plan;
          std::vector<uint8_t> out_cpu(static_cast<size_t>(kRows * 3 * kH * kW) * dtype_size(dtype));
          AugmentArgs a;
          a.images = {images_cpu.data(), {kImages, 3, kH, kW}, DType::U8};
          a.lut = {lut_cpu.data(), {3, 256}, DType::F32};
          a.plan = {plan_cpu.data(), {kRows, 6}, DType::I64};
          a.output = {out_cpu.data(), {kRows, 3, kH, kW}, dtype};
          a.cutout = cutout;
          a.reflect = reflect;
          a.channels_last = channels_last;
          cpu().augment_images(a);

          Buffer d_plan(gpu(), plan), d_out(gpu(), out_cpu.size());
          a.images = d_images.ref({kImages, 3, kH, kW}, DType::U8);
          a.lut = d_lut.ref({3, 256}, DType::F32);
          a.plan = d_plan.ref({kRows, 6}, DType::I64);
          a.output = d_out.ref({kRows, 3, kH, kW}, dtype);
          gpu().augment_images(a);
          expect_same(d_out.read(), out_cpu, dtype, what);
        }
      }
    }
  }
}

}  // namespace
}  // namespace demi::backend

// augment_images on the CPU: DataLoader's crop, flip, normalisation and cutout of a batch, row by
// row. One thread per call: the loader runs it on its own worker thread, beside the training step.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/augment_geometry.h"
#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"

namespace demi::backend::cpu {
namespace {

template <typename T>
void augment_typed(const AugmentArgs& a) {
  const int64_t rows = a.plan.shape[0], h = a.images.shape[2], w = a.images.shape[3], plane = h * w;
  const uint8_t* images = a.images.as<const uint8_t>();
  const float* lut = a.lut.as<const float>();
  const int64_t* plan = a.plan.as<const int64_t>();
  T* out = a.output.as<T>();
  // Where value (b, c, y, x) is stored: x steps by x_step, y by w * x_step, c by c_step.
  const int64_t x_step = a.channels_last ? 3 : 1, c_step = a.channels_last ? 1 : plane;
  std::vector<int64_t> cols(static_cast<size_t>(w));  // each output column's source column, -1: outside
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* p = plan + 6 * b;
    const uint8_t* src = images + p[0] * 3 * plane;
    T* image = out + b * 3 * plane;
    for (int64_t x = 0; x < w; ++x) cols[x] = augment::source_col(p, x, w, a.reflect);
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = augment::source_row(p, y, h, a.reflect);
      const bool row_inside = sy >= 0;
      for (int64_t c = 0; c < 3; ++c) {
        const uint8_t* src_row = src + c * plane + (row_inside ? sy * w : 0);
        const float* channel_lut = lut + c * 256;
        T* dst = image + c * c_step + y * w * x_step;
        for (int64_t x = 0; x < w; ++x)
          dst[x * x_step] = static_cast<T>(channel_lut[row_inside && cols[x] >= 0 ? src_row[cols[x]] : 0]);
      }
    }
    if (augment::has_cutout(p, a.cutout)) {  // the square, clipped at the border
      const int64_t top = augment::cutout_y0(p, a.cutout), left = augment::cutout_x0(p, a.cutout);
      const int64_t y0 = std::max<int64_t>(0, top), y1 = std::min(h, top + a.cutout);
      const int64_t x0 = std::max<int64_t>(0, left), x1 = std::min(w, left + a.cutout);
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t x = x0; x < x1; ++x) image[c * c_step + (y * w + x) * x_step] = static_cast<T>(0.0f);
    }
  }
}

}  // namespace

void CpuKernels::augment_images_impl(const AugmentArgs& a) {
  dispatch_floating(a.output.dtype, "augment_images", [&](auto tag) { augment_typed<decltype(tag)>(a); });
}

}  // namespace demi::backend::cpu

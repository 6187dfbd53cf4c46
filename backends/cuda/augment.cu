// CudaKernels::augment_images: DataLoader's crop, flip, normalisation and cutout of a batch from the
// uint8 image set held on the device; one thread per output value, in the output's storage order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/augment_geometry.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"

namespace demi::backend::cuda {
namespace {

constexpr int kThreads = 256;

struct AugmentShape {
  int64_t h, w;
  int cutout;
  bool reflect, channels_last;
};

template <typename T>
__global__ void augment_kernel(const uint8_t* images, const float* lut, const int64_t* plan, T* out, AugmentShape s,
                               int64_t n) {
  const int64_t plane = s.h * s.w;
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    int64_t b, c, y, x;
    if (s.channels_last) {
      c = i % 3;
      const int64_t pixel = i / 3;
      x = pixel % s.w, y = (pixel / s.w) % s.h, b = pixel / plane;
    } else {
      x = i % s.w, y = (i / s.w) % s.h;
      const int64_t bc = i / plane;
      c = bc % 3, b = bc / 3;
    }
    const int64_t* p = plan + 6 * b;
    const int64_t sy = augment::source_row(p, y, s.h, s.reflect), sx = augment::source_col(p, x, s.w, s.reflect);
    const bool inside = sy >= 0 && sx >= 0;
    float v = lut[c * 256 + (inside ? images[(p[0] * 3 + c) * plane + sy * s.w + sx] : 0)];
    if (augment::has_cutout(p, s.cutout)) {
      const int64_t y0 = augment::cutout_y0(p, s.cutout), x0 = augment::cutout_x0(p, s.cutout);
      if (y >= y0 && y < y0 + s.cutout && x >= x0 && x < x0 + s.cutout) v = 0.0f;
    }
    out[i] = Narrow<T>::from(v);
  }
}

}  // namespace

void CudaKernels::augment_images_impl(const AugmentArgs& a) {
  const int64_t n = a.output.numel();
  const DeviceGuard guard(index_);
  const AugmentShape s{a.images.shape[2], a.images.shape[3], a.cutout, a.reflect, a.channels_last};
  dispatch_floating(a.output.dtype, "augment_images", [&](auto tag) {
    using T = typename decltype(tag)::type;
    augment_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
        a.images.as<const uint8_t>(), a.lut.as<const float>(), a.plan.as<const int64_t>(), a.output.as<T>(), s, n);
    DEMI_CUDA_LAUNCH_CHECK("augment_kernel");
  });
}

}  // namespace demi::backend::cuda

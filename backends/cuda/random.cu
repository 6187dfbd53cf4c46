// Counter-based random numbers on CUDA: one thread per element, each running the Philox-4x32-10 and
// the transforms of backends/philox.h that the CPU backend runs too, so the GPU draws the CPU's
// numbers (uniforms bit for bit; normals up to libdevice's log/cos ulps, see philox.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"
#include "backends/philox.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;

// The next T below v, as the CPU's below(): for the rare uniform draw that rounds up to b.
__device__ inline float below(float v) { return __uint_as_float(philox::bits_below(__float_as_uint(v))); }
__device__ inline double below(double v) {
  return __longlong_as_double(static_cast<long long>(
      philox::bits_below(static_cast<unsigned long long>(__double_as_longlong(v)))));
}
__device__ inline __half below(__half v) { return __ushort_as_half(philox::bits_below(__half_as_ushort(v))); }
__device__ inline __nv_bfloat16 below(__nv_bfloat16 v) {
  return __ushort_as_bfloat16(philox::bits_below(__bfloat16_as_ushort(v)));
}

// out[i] for i in [0, n) draws from Philox counter offset + i under key seed (backends/philox.h).
// half_open: uniform with a < b, where a draw that rounds up to b steps down one ulp.
template <typename T>
__global__ void random_kernel(T* out, int64_t n, RandomKind kind, double a, double b, uint64_t seed,
                              uint64_t offset, bool half_open) {
  constexpr bool kWide = std::is_same_v<T, double>;
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    const philox::Words r = philox::philox4x32_10(offset + static_cast<uint64_t>(i), seed);
    if (kind == RandomKind::Uniform) {
      T v = Narrow<T>::from(philox::uniform(r.x0, r.x1, kWide, a, b));
      if (half_open && static_cast<double>(widen(v)) >= b) v = below(v);
      out[i] = v;
    } else {
      out[i] = Narrow<T>::from(philox::normal(r.x0, r.x1, r.x2, r.x3, kWide, a, b));
    }
  }
}

}  // namespace

// random: output (any shape, floating dtype) filled with uniform [a, b) or normal (a, b) draws.
void CudaKernels::random_impl(const RandomArgs& args) {
  const bool uniform = args.kind == RandomKind::Uniform;
  const int64_t n = args.output.numel();
  dispatch_floating(args.output.dtype, "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n == 0) return;
    const DeviceGuard guard(index_);
    random_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
        args.output.as<T>(), n, args.kind, args.a, args.b, args.seed, args.offset, uniform && args.a < args.b);
    DEMI_CUDA_LAUNCH_CHECK("random_kernel");
  });
}

}  // namespace demi::backend::cuda

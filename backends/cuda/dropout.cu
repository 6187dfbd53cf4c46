// Dropout on CUDA: one thread per element runs the Philox-4x32-10 of backends/philox.h on counter
// offset + i, as the `random` kernel does for element i, so the mask is the CPU's bit for bit, and
// the backward (the same kernel on grad_y) regenerates the forward's mask instead of storing it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/kernel_checks.h"
#include "backends/philox.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;

// y[i] = x[i] * (kept ? scale : 0) in acc_t<T>, rounded once; kept: u24's bits below keep_below.
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint32_t keep_below,
                               acc_t<T> scale) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    const philox::Words r = philox::philox4x32_10(offset + static_cast<uint64_t>(i), seed);
    const acc_t<T> m = (r.x0 >> 8) < keep_below ? scale : acc_t<T>(0);
    y[i] = Narrow<T>::from(mul_rn(widen(x[i]), m));
  }
}

}  // namespace

void CudaKernels::dropout_impl(const DropoutArgs& args, const DropoutMask& mask) {
  const int64_t n = args.input.numel();
  dispatch_floating(args.input.dtype, "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = acc_t<T>;
    if (n == 0) return;
    // Computed on the host in C, as the CPU kernel computes it.
    const C scale = mask.keep > 0.0 ? C(1) / static_cast<C>(mask.keep) : C(0);
    const DeviceGuard guard(index_);
    dropout_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
        args.input.as<const T>(), args.output.as<T>(), n, args.seed, args.offset, mask.keep_below, scale);
    DEMI_CUDA_LAUNCH_CHECK("dropout_kernel");
  });
}

}  // namespace demi::backend::cuda

// permute on CUDA: y = x with its dimensions reordered (transpose and other layout changes), with
// the CPU backend's semantics. Elements are moved as words of their width, so one kernel per width
// serves every dtype; one thread per element of y, reading x through its strides in y's order.
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

struct PermuteIndex {
  int rank = 0;
  int64_t y_extent[kMaxDims] = {};  // y's dims, innermost first
  int64_t x_stride[kMaxDims] = {};  // x's element stride of each of y's dims, innermost first
};

template <typename Word>
__global__ void permute_kernel(const Word* x, Word* y, int64_t n, PermuteIndex ix) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, src = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {  // unrolled: the parameter arrays stay statically indexed
      if (d == ix.rank) break;
      src += (rest % ix.y_extent[d]) * ix.x_stride[d];
      rest /= ix.y_extent[d];
    }
    y[i] = x[src];
  }
}

}  // namespace

// permute: x of rank <= 8, any dtype -> y with y.shape[i] = x.shape[dims[i]].
void CudaKernels::permute_impl(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) {
  const int64_t n = y.numel();
  if (n == 0) return;
  const int rank = static_cast<int>(x.shape.size());
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
  for (int d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * x.shape[d];
  PermuteIndex ix;
  ix.rank = rank;
  for (int i = 0; i < rank; ++i) {
    ix.y_extent[rank - 1 - i] = y.shape[i];
    ix.x_stride[rank - 1 - i] = stride[static_cast<size_t>(dims[i])];
  }
  const DeviceGuard guard(index_);
  const unsigned blocks = blocks_for(n, kThreads);
  switch (dtype_size(x.dtype)) {
    case 1: permute_kernel<uint8_t><<<blocks, kThreads, 0, stream_>>>(x.as<const uint8_t>(), y.as<uint8_t>(), n, ix); break;
    case 2: permute_kernel<uint16_t><<<blocks, kThreads, 0, stream_>>>(x.as<const uint16_t>(), y.as<uint16_t>(), n, ix); break;
    case 4: permute_kernel<uint32_t><<<blocks, kThreads, 0, stream_>>>(x.as<const uint32_t>(), y.as<uint32_t>(), n, ix); break;
    case 8: permute_kernel<uint64_t><<<blocks, kThreads, 0, stream_>>>(x.as<const uint64_t>(), y.as<uint64_t>(), n, ix); break;
    default: DEMI_THROW("permute: unsupported element size ", dtype_size(x.dtype));
  }
  DEMI_CUDA_LAUNCH_CHECK("permute_kernel");
}

}  // namespace demi::backend::cuda

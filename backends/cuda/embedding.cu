// Embedding on CUDA. The forward copies rows, one thread per element. The backward sorts the
// positions by index (CUB's radix sort, stable: equal indices keep ascending positions), finds each
// row's run by binary search and has one thread per grad_weight element add its run's gradients in
// ascending position in fp32 (fp64 for fp64): the CPU's order and arithmetic, so the two agree bit
// for bit, deterministic, without float atomics. Indices are checked on the device; a bad one is
// reported through report() and thrown on the host with the CPU's message.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/host_reads.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNoBadIndex = ~0ull;

// The smallest position m whose index is outside [0, V) goes to *first_bad.
__global__ void check_indices_kernel(const int64_t* idx, int64_t M, int64_t V, unsigned long long* first_bad) {
  for (int64_t m = thread_index(); m < M; m += grid_width()) {
    if (idx[m] < 0 || idx[m] >= V) atomicMin(first_bad, static_cast<unsigned long long>(m));
  }
}

// out[m, d] = weight[idx[m], d]; a bad index's row is left unwritten (it is reported and thrown).
template <typename T>
__global__ void gather_rows_kernel(const T* weight, const int64_t* idx, int64_t V, int64_t D, int64_t n, T* out) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) {
    const int64_t v = idx[i / D];
    if (v >= 0 && v < V) out[i] = weight[v * D + i % D];
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_width()) out[i] = static_cast<int32_t>(i);
}

// start[v] for v in [0, V]: the first sorted position whose index is >= v.
__global__ void run_starts_kernel(const int64_t* sorted, int64_t M, int64_t V, int32_t* start) {
  for (int64_t v = thread_index(); v <= V; v += grid_width()) {
    int64_t lo = 0, hi = M;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted[mid] < v) lo = mid + 1;
      else hi = mid;
    }
    start[v] = static_cast<int32_t>(lo);
  }
}

// grad_weight[v, d] = sum over j in [start[v], start[v + 1]) of grad[order[j], d], ascending j, in
// acc_t<T>; 0 for padding_idx's row.
template <typename T>
__global__ void sum_rows_kernel(const T* grad, const int32_t* order, const int32_t* start, int64_t V, int64_t D,
                                int64_t padding_idx, T* grad_weight) {
  for (int64_t i = thread_index(); i < V * D; i += grid_width()) {
    const int64_t v = i / D, d = i % D;
    acc_t<T> acc = 0;
    if (v != padding_idx) {
      for (int32_t j = start[v]; j < start[v + 1]; ++j) acc = add_rn(acc, widen(grad[int64_t{order[j]} * D + d]));
    }
    grad_weight[i] = Narrow<T>::from(acc);
  }
}

// The bits a radix sort of indices in [0, V) needs.
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < V) ++bits;
  return bits;
}

// Rounds a byte count up to CUB's (and the loads') alignment.
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Checks indices on the device and throws, with the CPU's message, for the first bad one. Waits for
// the stream: the host must see a bad index now, as on the CPU.
void throw_if_bad_index(const char* op, const TensorRef& indices, int64_t V, unsigned long long* report,
                        cudaStream_t stream, unsigned blocks) {
  const int64_t M = indices.numel();
  if (M == 0) return;
  DEMI_CUDA_CHECK(cudaMemsetAsync(report, 0xff, sizeof(*report), stream));
  check_indices_kernel<<<blocks, kThreads, 0, stream>>>(indices.as<const int64_t>(), M, V, report);
  DEMI_CUDA_LAUNCH_CHECK("check_indices_kernel");
  note_host_read("embedding's index check");
  unsigned long long first_bad = kNoBadIndex;
  DEMI_CUDA_CHECK(cudaMemcpyAsync(&first_bad, report, sizeof(first_bad), cudaMemcpyDeviceToHost, stream));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first_bad == kNoBadIndex) return;
  const int64_t m = static_cast<int64_t>(first_bad);
  int64_t value = 0;
  DEMI_CUDA_CHECK(cudaMemcpyAsync(&value, indices.as<const int64_t>() + m, sizeof(value), cudaMemcpyDeviceToHost,
                                  stream));
  DEMI_CUDA_CHECK(cudaStreamSynchronize(stream));
  throw_embedding_index(op, indices.shape, m, value, V);
}

}  // namespace

void CudaKernels::embedding_forward_impl(const EmbeddingArgs& args) {
  const int64_t V = args.weight.shape[0], D = args.weight.shape[1], n = args.output.numel();
  const DeviceGuard guard(index_);
  dispatch_floating(args.weight.dtype, "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n == 0) return;
    gather_rows_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(
        args.weight.as<const T>(), args.indices.as<const int64_t>(), V, D, n, args.output.as<T>());
    DEMI_CUDA_LAUNCH_CHECK("gather_rows_kernel");
  });
  const int64_t M = args.indices.numel();
  throw_if_bad_index("embedding", args.indices, V, report_, stream_, M > 0 ? blocks_for(M, kThreads) : 1);
}

void CudaKernels::embedding_backward_impl(const EmbeddingArgs& args) {
  constexpr const char* op = "embedding_backward";
  const int64_t V = args.grad_weight.shape[0], D = args.grad_weight.shape[1], M = args.indices.numel();
  DEMI_CHECK(M < std::numeric_limits<int32_t>::max() && V < std::numeric_limits<int32_t>::max(), op,
             ": the CUDA backend takes fewer than 2^31 - 1 indices and rows, got ", M, " and ", V);
  const DeviceGuard guard(index_);
  throw_if_bad_index(op, args.indices, V, report_, stream_, M > 0 ? blocks_for(M, kThreads) : 1);
  if (V * D == 0) return;
  const int32_t* no_int = nullptr;
  const int64_t* no_key = nullptr;
  size_t sort_bytes = 0;
  if (M > 0) {
    DEMI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, no_key, static_cast<int64_t*>(nullptr), no_int,
                                                    static_cast<int32_t*>(nullptr), static_cast<int>(M), 0, key_bits(V),
                                                    stream_));
  }
  const size_t keys_bytes = aligned(static_cast<size_t>(M) * sizeof(int64_t));
  const size_t order_bytes = aligned(static_cast<size_t>(M) * sizeof(int32_t));
  const size_t start_bytes = aligned(static_cast<size_t>(V + 1) * sizeof(int32_t));
  char* base = static_cast<char*>(workspace(keys_bytes + 2 * order_bytes + start_bytes + aligned(sort_bytes)));
  auto* sorted = reinterpret_cast<int64_t*>(base);
  auto* positions = reinterpret_cast<int32_t*>(base + keys_bytes);
  auto* order = reinterpret_cast<int32_t*>(base + keys_bytes + order_bytes);
  auto* start = reinterpret_cast<int32_t*>(base + keys_bytes + 2 * order_bytes);
  void* sort_scratch = base + keys_bytes + 2 * order_bytes + start_bytes;
  if (M > 0) {
    iota_kernel<<<blocks_for(M, kThreads), kThreads, 0, stream_>>>(positions, M);
    DEMI_CUDA_LAUNCH_CHECK("iota_kernel");
    DEMI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, args.indices.as<const int64_t>(), sorted,
                                                    positions, order, static_cast<int>(M), 0, key_bits(V), stream_));
  }
  run_starts_kernel<<<blocks_for(V + 1, kThreads), kThreads, 0, stream_>>>(sorted, M, V, start);
  DEMI_CUDA_LAUNCH_CHECK("run_starts_kernel");
  dispatch_floating(args.grad_weight.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_rows_kernel<T><<<blocks_for(V * D, kThreads), kThreads, 0, stream_>>>(
        args.grad_output.as<const T>(), order, start, V, D, args.padding_idx, args.grad_weight.as<T>());
    DEMI_CUDA_LAUNCH_CHECK("sum_rows_kernel");
  });
}

}  // namespace demi::backend::cuda

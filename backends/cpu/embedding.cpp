// Embedding on the CPU: the forward copies rows; the backward groups the positions by row with a
// stable counting sort and sums each row's gradients in ascending position, one row per thread at a
// time, so the result is the same on any thread count and needs no atomics or per-thread copies of
// grad_weight.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// Scratch slots: the calling thread's outside the parallel region, each thread's inside it.
constexpr int kSlotStart = 0, kSlotOrder = 1, kSlotAcc = 2, kSlotRow = 3;

void check_indices(const char* op, const TensorRef& indices, int64_t V) {
  const int64_t* idx = indices.as<int64_t>();
  const int64_t M = indices.numel();
  for (int64_t m = 0; m < M; ++m) {
    if (idx[m] < 0 || idx[m] >= V) throw_embedding_index(op, indices.shape, m, idx[m], V);
  }
}

// start[v] .. start[v + 1]: where row v's positions sit in order, ascending (a stable counting sort).
void group_by_row(const int64_t* idx, int64_t M, int64_t V, int64_t* start, int64_t* order) {
  std::fill(start, start + V + 1, int64_t{0});
  for (int64_t m = 0; m < M; ++m) ++start[idx[m] + 1];
  for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
  for (int64_t m = 0; m < M; ++m) order[start[idx[m]]++] = m;  // start[v] moves to row v's end
  for (int64_t v = V; v > 0; --v) start[v] = start[v - 1];
  start[0] = 0;
}

// grad_weight row v = sum of grad_output rows order[start[v] .. start[v + 1]), accumulated in C.
template <typename T>
void sum_rows(const EmbeddingArgs& args, const int64_t* start, const int64_t* order) {
  using C = acc_t<T>;
  const int64_t V = args.grad_weight.shape[0], D = args.grad_weight.shape[1];
  const int64_t M = args.indices.numel();
  const T* g = args.grad_output.as<T>();
  T* gw = args.grad_weight.as<T>();
  const int64_t per_row = D * (1 + M / std::max<int64_t>(V, 1));
  parallel_for(V, std::max<int64_t>(per_row, 1), [&](int64_t begin, int64_t end) {
    C* acc = thread_scratch<C>(kSlotAcc, D);
    C* wide = thread_scratch<C>(kSlotRow, D);
    for (int64_t v = begin; v < end; ++v) {
      T* out = gw + v * D;
      std::fill(acc, acc + D, C(0));
      if (v != args.padding_idx) {
        for (int64_t j = start[v]; j < start[v + 1]; ++j) {
          const T* row = g + order[j] * D;
          if constexpr (std::is_same_v<T, C>) {
            for (int64_t d = 0; d < D; ++d) acc[d] += row[d];
          } else {
            convert_n(row, wide, D);
            for (int64_t d = 0; d < D; ++d) acc[d] += wide[d];
          }
        }
      }
      convert_n(acc, out, D);
    }
  });
}

}  // namespace

void CpuKernels::embedding_forward_impl(const EmbeddingArgs& args) {
  const int64_t V = args.weight.shape[0];
  check_indices("embedding", args.indices, V);
  const int64_t* idx = args.indices.as<int64_t>();
  const size_t row_bytes = static_cast<size_t>(args.weight.shape[1]) * dtype_size(args.weight.dtype);
  const char* w = static_cast<const char*>(args.weight.data);
  char* out = static_cast<char*>(args.output.data);
  parallel_for(args.indices.numel(), static_cast<int64_t>(row_bytes / 4 + 1), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      copy_short(w + static_cast<size_t>(idx[m]) * row_bytes, static_cast<int64_t>(row_bytes),
                 out + static_cast<size_t>(m) * row_bytes);
    }
  });
}

void CpuKernels::embedding_backward_impl(const EmbeddingArgs& args) {
  const int64_t V = args.grad_weight.shape[0], M = args.indices.numel();
  check_indices("embedding_backward", args.indices, V);
  int64_t* start = thread_scratch<int64_t>(kSlotStart, V + 1);
  int64_t* order = thread_scratch<int64_t>(kSlotOrder, M);
  group_by_row(args.indices.as<int64_t>(), M, V, start, order);
  dispatch_floating(args.grad_weight.dtype, "embedding_backward",
                    [&](auto tag) { sum_rows<decltype(tag)>(args, start, order); });
}

}  // namespace demi::backend::cpu

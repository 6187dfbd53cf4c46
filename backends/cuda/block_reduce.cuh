// Warp- and block-wide reductions shared by the CUDA kernels (reduce, softmax, cross-entropy, batch
// norm, conv2d's bias gradient), and RowLanes, the threads that share one row. One fixed combination
// tree, a butterfly over each warp then over the warps' results: results are deterministic and the
// same on every thread, with no atomics. Included only by .cu files.
#pragma once

#include <cstdint>

namespace demi::backend::cuda {

// Lane (lane ^ mask)'s value of v, for the types the kernels reduce.
__device__ inline float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ inline double shfl_xor(double v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ inline double2 shfl_xor(double2 v, int mask) {
  return make_double2(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask));
}

// Combine ops (identity 0, and -inf for FMax). double2 sums two running totals at once.
struct Sum {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a + b; }
  __device__ double2 operator()(double2 a, double2 b) const { return make_double2(a.x + b.x, a.y + b.y); }
};
// fmax ignores a NaN operand, as the CPU's std::max(m, x) does for a NaN x.
struct FMax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// Every lane gets op over the warp's 32 values of v. A butterfly: the same operands meet in the same
// order on every lane, so all lanes agree bit for bit (and lane 0 gets what a __shfl_down tree gives
// it). All 32 lanes of the warp must call it together.
template <typename A, typename Op>
__device__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return v;
}

// Every thread gets op over the block's values of v: each warp's warp_reduce, then a warp_reduce of
// the warps' results, with `identity` (op(x, identity) == x) padding the lanes past the last warp.
// Needs a 1-D block whose blockDim.x is a multiple of 32 and at most 1024, and every thread of the
// block to call it (it synchronises). It may be called again straight away, with any A: it waits
// for the previous call's readers before it writes its shared slots.
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A identity) {
  __shared__ A warp_results[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers are done with warp_results
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? warp_results[lane] : identity;
  return warp_reduce(v, op);
}

// The threads sharing one row (one output's reduced elements): a warp, several rows per block, or
// the whole block (kBlockPerRow, for long rows). Rows first_row, first_row + row_step, ... are this
// thread's; its elements of a row are lane, lane + width, .... Needs blockDim.x a multiple of 32 (at
// most 1024); a kernel looping over rows must keep the loop condition uniform over a row's threads,
// so that all of them reach each reduce().
template <bool kBlockPerRow>
struct RowLanes {
  int lane, width;
  int64_t first_row, row_step;
  __device__ RowLanes() {
    const int64_t rows_per_block = kBlockPerRow ? 1 : blockDim.x / 32;
    lane = kBlockPerRow ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x % 32);
    width = kBlockPerRow ? static_cast<int>(blockDim.x) : 32;
    first_row = int64_t(blockIdx.x) * rows_per_block + (kBlockPerRow ? 0 : threadIdx.x / 32);
    row_step = int64_t(gridDim.x) * rows_per_block;
  }
  // op over the row's values of v, in every thread of the row.
  template <typename A, typename Op>
  __device__ A reduce(A v, Op op, A identity) const {
    if constexpr (kBlockPerRow) return block_reduce(v, op, identity);
    else return warp_reduce(v, op);
  }
};

}  // namespace demi::backend::cuda

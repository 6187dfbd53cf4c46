// Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
// for 3x3 convolutions with stride 1 and padding 1: each 2x2 block of outputs ("tile") comes from
// the 4x4 input patch around it as Y = A^T [sum_c (G g G^T) . (B^T d B)] A. The sum over input
// channels is 16 independent GEMMs (one per point of the 4x4 transformed tile) of 2.25x fewer
// multiplies than the direct convolution's one GEMM; the transforms are additions only.
//
// Why not F(4x4, 3x3) (1.78x fewer multiplies): in fp32 its error breaks the bound every fp32
// convolution test holds (tests/support/tolerance.h, accumulated(F32, 9 C)) with every choice of
// points tried, by up to 2.9-10x at 256 channels, where F(2x2, 3x3) stays within 0.55x of it
// (measured by benchmarks/winograd_error: each transform's largest error over that bound, random
// tiles against the direct convolution in double, up to 256 channels).
//
//   B^T = | 1  0 -1  0 |    G = | 1    0    0   |    A^T = | 1  1  1  0 |
//         | 0  1  1  0 |        | 1/2  1/2  1/2 |          | 0  1 -1 -1 |
//         | 0 -1  1  0 |        | 1/2 -1/2  1/2 |
//         | 0  1  0 -1 |        | 0    0    1   |
//
// Layouts: U[xi][out][in] (the transformed weights), V[xi][in][tile] and M[xi][out][tile], xi =
// 4 * row + column of the 4x4 tile; tiles run over whole images, row by row (conv2d_winograd.cpp pads the
// rows to whole cache lines and the points to an odd number of lines). The input and output
// transforms are vectorised per ISA level (below); the weight transforms here are plain C++.
#pragma once

#include <cstdint>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_walk.h"
#include "backends/cpu/packed_gemm.h"

namespace demi::backend::cpu::winograd {

constexpr int64_t kPoints = 16;

// Tap (r, c) of the 3x3 filter g from input channel i to output channel o: w is [outs][ins][3][3] or,
// when `adjoint`, the forward weight [ins][outs][3][3] of the convolution whose backward-data this is,
// g = w[i][o] rotated by 180 degrees. Both Winograd weight transforms read filters through it.
inline float filter_tap(const float* w, int64_t outs, int64_t ins, bool adjoint, int64_t o, int64_t i, int r, int c) {
  return adjoint ? w[((i * outs + o) * 3 + 2 - r) * 3 + 2 - c] : w[((o * ins + i) * 3 + r) * 3 + c];
}

// U[xi * outs * ins + o * ins + i] = (G g G^T)[xi] with g the 3x3 filter from input channel i to
// output channel o. w is [outs][ins][3][3] or, when `adjoint`, the forward weight [ins][outs][3][3]
// of the convolution whose backward-data this is: then g = w[i][o] rotated by 180 degrees. Output
// channels [o_begin, o_end) only, so that threads can share the work. Input channels go kBlock at a
// time, each step a loop over the block that the compiler vectorises and each point's row stored as
// one run (filter by filter, the 16 scattered stores took 8% of an AirNet 256 -> 256 forward).
inline void transform_weights(const float* w, int64_t outs, int64_t ins, bool adjoint, float* u, int64_t o_begin,
                              int64_t o_end) {
  constexpr int64_t kBlock = 16;
  const int64_t step = outs * ins;  // from one point's U to the next
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t i0 = 0; i0 < ins; i0 += kBlock) {
      const int64_t n = ins - i0 < kBlock ? ins - i0 : kBlock;
      float g[3][3][kBlock];
      for (int64_t k = 0; k < n; ++k) {
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c) g[r][c][k] = filter_tap(w, outs, ins, adjoint, o, i0 + k, r, c);
      }
      float gg[4][3][kBlock];  // G g
      for (int c = 0; c < 3; ++c) {
        for (int64_t k = 0; k < n; ++k) {
          gg[0][c][k] = g[0][c][k];
          gg[1][c][k] = 0.5f * (g[0][c][k] + g[1][c][k] + g[2][c][k]);
          gg[2][c][k] = 0.5f * (g[0][c][k] - g[1][c][k] + g[2][c][k]);
          gg[3][c][k] = g[2][c][k];
        }
      }
      for (int r = 0; r < 4; ++r) {  // (G g) G^T
        float* row = u + (r * 4) * step + o * ins + i0;
        for (int64_t k = 0; k < n; ++k) {
          row[k] = gg[r][0][k];
          row[step + k] = 0.5f * (gg[r][0][k] + gg[r][1][k] + gg[r][2][k]);
          row[2 * step + k] = 0.5f * (gg[r][0][k] - gg[r][1][k] + gg[r][2][k]);
          row[3 * step + k] = gg[r][2][k];
        }
      }
    }
  }
}

// The transformed weights of a Winograd convolution with `points` points (16 here, 36 for F(4x4)),
// packed for the GEMM tile, one panel per point, in the calling thread's kSlotPacked: transform(u,
// o_begin, o_end) writes U[xi][o][i] (layout above) for output channels [o_begin, o_end), into
// kSlotPartial meanwhile. Both steps are spread over the threads: done by one, they left the other
// idle for 6% of an AirNet 256 -> 256 forward (8 MiB of transformed and packed weights per call).
template <typename Transform>
const float* packed_weights(int64_t points, int64_t outs, int64_t ins, const Transform& transform) {
  float* u = thread_scratch<float>(conv2d_walk::kSlotPartial, points * outs * ins);
  parallel_for(outs, points * 9 * ins, [&](int64_t begin, int64_t end) { transform(u, begin, end); });
  const int64_t panel = packed_gemm::packed_size(outs, ins);
  float* packed = thread_scratch<float>(conv2d_walk::kSlotPacked, points * panel);
  parallel_for(points, 2 * panel, [&](int64_t begin, int64_t end) {
    for (int64_t xi = begin; xi < end; ++xi) packed_gemm::pack_a(u + xi * outs * ins, ins, 1, outs, ins, packed + xi * panel);
  });
  return packed;
}

// The transforms of the input, output and output gradient are vector code, one variant per ISA
// level (isa/winograd_<isa>.cpp, table entry isa::Winograd); their layouts:
// - The zero-padded plane of an h x w input split by column parity (split_columns): tile tx reads
//   padded columns 2tx .. 2tx + 3, i.e. e[tx], o[tx], e[tx + 1], o[tx + 1] with e[r][k] = padded(r,
//   2k) = x[r - 1][2k - 1] and o[r][k] = padded(r, 2k + 1) = x[r - 1][2k]. Then every step of B^T d B
//   is whole-row vector arithmetic over tx. e and o are rows x n with n = tw + 1 and rows = 2 th + 2.
// - Lane groups: a row of tiles of a small plane fills a fraction of a vector (a 7x7 plane has 4
//   tiles a row), so the transforms run `images` planes side by side, lane = image * tw + tx, and
//   V, M and Z store a group's tiles row by row across its images: point xi of image g's tile
//   (ty, tx) at [xi * ld + ty * lanes + g * tw + tx], lanes = images * tw <= the level's vector
//   width. One image is the plain layout, ty * tw + tx. conv2d_winograd.cpp's WinogradWalk picks the group.
// - transform_input reads four views of the split columns (isa::SplitLanes), each `lanes` wide per
//   row: e0[r][lane] = e[r][tx], e1[r][lane] = e[r][tx + 1], o0 and o1 alike from o. For one image
//   they are e, e + 1, o, o + 1 themselves (stride n); for a group, split_lanes writes them straight
//   from the group's planes, a whole row of lanes at a time.
// - The weight gradient: dL/dU = sum over tiles of (A dY A^T) . V, dL/dg = G^T (dL/dU) G, with
//   Z = A dY A^T laid out as V: the output-gradient planes are split by column parity into rows of
//   lanes (one plane: split_grad_output, the caller zeroing e and o first so that tiles past the
//   plane read zeros; a lane group: split_grad_lanes, every row written), then Z comes from the
//   split rows at once (transform_grad_output).

// dL/dg = G^T du G for N filters side by side: du[xi][j] is point xi of the gradient of filter j's
// transformed filter, g[r * 3 + c][j] its 3x3 gradient. Each step is a loop over the N filters,
// which the compiler vectorises.
//   G^T = | 1  1/2  1/2  0 |
//         | 0  1/2 -1/2  0 |
//         | 0  1/2  1/2  1 |
template <int64_t N>
inline void weight_gradients(const float (&du)[kPoints][N], float (&g)[9][N]) {
  float t[3][4][N];  // G^T du
  for (int c = 0; c < 4; ++c) {
    for (int64_t j = 0; j < N; ++j) {
      const float d0 = du[c][j], d1 = du[4 + c][j], d2 = du[8 + c][j], d3 = du[12 + c][j];
      t[0][c][j] = d0 + 0.5f * (d1 + d2);
      t[1][c][j] = 0.5f * (d1 - d2);
      t[2][c][j] = 0.5f * (d1 + d2) + d3;
    }
  }
  for (int r = 0; r < 3; ++r) {  // (G^T du) G
    for (int64_t j = 0; j < N; ++j) {
      const float t0 = t[r][0][j], t1 = t[r][1][j], t2 = t[r][2][j], t3 = t[r][3][j];
      g[r * 3 + 0][j] = t0 + 0.5f * (t1 + t2);
      g[r * 3 + 1][j] = 0.5f * (t1 - t2);
      g[r * 3 + 2][j] = 0.5f * (t1 + t2) + t3;
    }
  }
}

}  // namespace demi::backend::cpu::winograd

// Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
// for 3x3 convolutions with stride 1 and padding 1: each 2x2 block of outputs ("tile") comes from
// the 4x4 input patch around it as Y = A^T [sum_c (G g G^T) . (B^T d B)] A. The sum over input
// channels is 16 independent GEMMs (one per point of the 4x4 transformed tile) of 2.25x fewer
// multiplies than the direct convolution's one GEMM; the transforms are additions only.
//
//   B^T = | 1  0 -1  0 |    G = | 1    0    0   |    A^T = | 1  1  1  0 |
//         | 0  1  1  0 |        | 1/2  1/2  1/2 |          | 0  1 -1 -1 |
//         | 0 -1  1  0 |        | 1/2 -1/2  1/2 |
//         | 0  1  0 -1 |        | 0    0    1   |
//
// Layouts: U[xi][out][in] (the transformed weights), V[xi][in][tile] and M[xi][out][tile], xi =
// 4 * row + column of the 4x4 tile; tiles run over whole images, row by row. The input and output
// transforms are AVX-512, like the GEMM they feed (conv2d.cpp uses them only on that path).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/packed_gemm.h"

namespace demi::backend::cpu::winograd {

constexpr int64_t kPoints = 16;

// U[xi * outs * ins + o * ins + i] = (G g G^T)[xi] with g the 3x3 filter from input channel i to
// output channel o. w is [outs][ins][3][3] or, when `adjoint`, the forward weight [ins][outs][3][3]
// of the convolution whose backward-data this is: then g = w[i][o] rotated by 180 degrees.
inline void transform_weights(const float* w, int64_t outs, int64_t ins, bool adjoint, float* u) {
  for (int64_t o = 0; o < outs; ++o) {
    for (int64_t i = 0; i < ins; ++i) {
      float g[3][3];
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c)
          g[r][c] = adjoint ? w[((i * outs + o) * 3 + 2 - r) * 3 + 2 - c] : w[((o * ins + i) * 3 + r) * 3 + c];
      float gg[4][3];  // G g
      for (int c = 0; c < 3; ++c) {
        gg[0][c] = g[0][c];
        gg[1][c] = 0.5f * (g[0][c] + g[1][c] + g[2][c]);
        gg[2][c] = 0.5f * (g[0][c] - g[1][c] + g[2][c]);
        gg[3][c] = g[2][c];
      }
      for (int r = 0; r < 4; ++r) {  // (G g) G^T
        float* row = u + (r * 4) * outs * ins + o * ins + i;
        const int64_t step = outs * ins;
        row[0 * step] = gg[r][0];
        row[1 * step] = 0.5f * (gg[r][0] + gg[r][1] + gg[r][2]);
        row[2 * step] = 0.5f * (gg[r][0] - gg[r][1] + gg[r][2]);
        row[3 * step] = gg[r][2];
      }
    }
  }
}

#if DEMI_PACKED_GEMM  // the transforms of the AVX-512 convolution path
using packed_gemm::lane_mask;

// The zero-padded plane of an h x w input split by column parity: tile tx reads padded columns
// 2tx .. 2tx + 3, i.e. e[tx], o[tx], e[tx + 1], o[tx + 1] with e[r][k] = padded(r, 2k) = x[r - 1][2k - 1]
// and o[r][k] = padded(r, 2k + 1) = x[r - 1][2k]. Then every step of B^T d B is whole-row vector
// arithmetic over tx. e and o are rows x n with n = tw + 1 and rows = 2 th + 2 (zero outside x).
inline void split_columns(const float* x, int64_t h, int64_t w, int64_t n, int64_t rows, float* e, float* o) {
  std::fill(e, e + rows * n, 0.0f);
  std::fill(o, o + rows * n, 0.0f);
  const __m512i even_lanes = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_lanes = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t y = 0; y < h; ++y) {
    const float* src = x + y * w;
    float* er = e + (y + 1) * n;
    float* orow = o + (y + 1) * n;
    for (int64_t base = 0; base < w; base += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(w - base), src + base);
      const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(w - base - 16), src + base + 16);
      const int64_t k = base / 2;
      // x[base + 2j] -> o[k + j]; x[base + 2j + 1] -> e[k + j + 1]
      _mm512_mask_storeu_ps(orow + k, lane_mask((w + 1) / 2 - k), _mm512_permutex2var_ps(lo, even_lanes, hi));
      _mm512_mask_storeu_ps(er + k + 1, lane_mask(w / 2 - k), _mm512_permutex2var_ps(lo, odd_lanes, hi));
    }
  }
}

// V for the tiles of one plane from its split columns (split_columns): point xi of tile (ty, tx)
// goes to v[xi * ld + ty * tw + tx]. Row i of B^T d and then its columns are formed in registers
// (a row stored and reloaded one lane over stalls on store forwarding).
inline void transform_input(const float* e, const float* o, int64_t n, int64_t th, int64_t tw, float* v, int64_t ld) {
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int i = 0; i < 4; ++i) {
      // Row i of B^T d: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (rows of the padded plane from 2 ty).
      const int64_t a = 2 * ty + (i == 0 ? 0 : i == 2 ? 2 : 1);
      const int64_t b = 2 * ty + (i == 0 ? 2 : i == 1 ? 2 : i == 2 ? 1 : 3);
      const float *ea = e + a * n, *eb = e + b * n, *oa = o + a * n, *ob = o + b * n;
      auto row = [i](__m512 x, __m512 y) { return i == 1 ? _mm512_add_ps(x, y) : _mm512_sub_ps(x, y); };
      float* v0 = v + (4 * i) * ld + ty * tw;
      for (int64_t tx = 0; tx < tw; tx += 16) {
        const __mmask16 m = lane_mask(tw - tx);
        // Columns 2tx .. 2tx + 3 of the row: e[tx], o[tx], e[tx + 1], o[tx + 1].
        const __m512 e0 = row(_mm512_maskz_loadu_ps(m, ea + tx), _mm512_maskz_loadu_ps(m, eb + tx));
        const __m512 o0 = row(_mm512_maskz_loadu_ps(m, oa + tx), _mm512_maskz_loadu_ps(m, ob + tx));
        const __m512 e1 = row(_mm512_maskz_loadu_ps(m, ea + tx + 1), _mm512_maskz_loadu_ps(m, eb + tx + 1));
        const __m512 o1 = row(_mm512_maskz_loadu_ps(m, oa + tx + 1), _mm512_maskz_loadu_ps(m, ob + tx + 1));
        _mm512_mask_storeu_ps(v0 + tx, m, _mm512_sub_ps(e0, e1));
        _mm512_mask_storeu_ps(v0 + ld + tx, m, _mm512_add_ps(o0, e1));
        _mm512_mask_storeu_ps(v0 + 2 * ld + tx, m, _mm512_sub_ps(e1, o0));
        _mm512_mask_storeu_ps(v0 + 3 * ld + tx, m, _mm512_sub_ps(o0, o1));
      }
    }
  }
}

// One output plane (oh x ow, ow <= 2 tw) from M: point xi of tile (ty, tx) is m[xi * ld + ty * tw +
// tx]; writes A^T m A + bias into y (row stride ow).
inline void transform_output(const float* m, int64_t ld, int64_t oh, int64_t ow, int64_t th, int64_t tw, float bias,
                             float* y) {
  const __m512i first_pairs = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second_pairs = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512 b = _mm512_set1_ps(bias);
  for (int64_t ty = 0; ty < th; ++ty) {
    const float* p = m + ty * tw;
    for (int64_t tx = 0; tx < tw; tx += 16) {
      const __mmask16 mask = lane_mask(tw - tx);
      __m512 s0[4], s1[4];  // rows 0 and 1 of A^T m, for each column j
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_maskz_loadu_ps(mask, p + j * ld + tx);
        const __m512 m1 = _mm512_maskz_loadu_ps(mask, p + (4 + j) * ld + tx);
        const __m512 m2 = _mm512_maskz_loadu_ps(mask, p + (8 + j) * ld + tx);
        const __m512 m3 = _mm512_maskz_loadu_ps(mask, p + (12 + j) * ld + tx);
        s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 rows[2][2] = {
          {_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]), b),
           _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]), b)},
          {_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]), b),
           _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]), b)}};
      for (int r = 0; r < 2; ++r) {
        const int64_t oy = 2 * ty + r;
        if (oy >= oh) break;
        float* row = y + oy * ow + 2 * tx;  // even and odd columns interleaved
        const int64_t left = ow - 2 * tx;
        _mm512_mask_storeu_ps(row, lane_mask(left), _mm512_permutex2var_ps(rows[r][0], first_pairs, rows[r][1]));
        _mm512_mask_storeu_ps(row + 16, lane_mask(left - 16),
                              _mm512_permutex2var_ps(rows[r][0], second_pairs, rows[r][1]));
      }
    }
  }
}

// The weight gradient of the same convolution: dL/dU = sum over tiles of (A dY A^T) . V, and
// dL/dg = G^T (dL/dU) G. For the tiles of one oh x ow output-gradient plane, point xi of A dY A^T
// goes to z[xi * ld + ty * tw + tx] (outputs beyond the plane count as 0). `split` is scratch of
// 4 * th * tw floats: the plane's even and odd columns, rows 0 .. 2 th (zero beyond the plane).
//   A dY A^T with A^T = | 1 1  1  0 |: rows y0, y0 + y1, y0 - y1, -y1 of the 2x2 block, then the
//                       | 0 1 -1 -1 |  same combinations of its two columns.
inline void transform_grad_output(const float* gy, int64_t oh, int64_t ow, int64_t th, int64_t tw, float* z,
                                  int64_t ld, float* split) {
  float* e = split;                // e[y][tx] = gy[y][2 tx]
  float* o = split + 2 * th * tw;  // o[y][tx] = gy[y][2 tx + 1]
  std::fill(split, split + 4 * th * tw, 0.0f);
  const __m512i even_lanes = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_lanes = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t base = 0; base < ow; base += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(ow - base), gy + y * ow + base);
      const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(ow - base - 16), gy + y * ow + base + 16);
      const int64_t k = base / 2;
      _mm512_mask_storeu_ps(e + y * tw + k, lane_mask((ow + 1) / 2 - k), _mm512_permutex2var_ps(lo, even_lanes, hi));
      _mm512_mask_storeu_ps(o + y * tw + k, lane_mask(ow / 2 - k), _mm512_permutex2var_ps(lo, odd_lanes, hi));
    }
  }
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int64_t tx = 0; tx < tw; tx += 16) {
      const __mmask16 m = lane_mask(tw - tx);
      const __m512 e0 = _mm512_maskz_loadu_ps(m, e + 2 * ty * tw + tx), o0 = _mm512_maskz_loadu_ps(m, o + 2 * ty * tw + tx);
      const __m512 e1 = _mm512_maskz_loadu_ps(m, e + (2 * ty + 1) * tw + tx);
      const __m512 o1 = _mm512_maskz_loadu_ps(m, o + (2 * ty + 1) * tw + tx);
      // Rows of A dY, split by column: (even, odd) for y0, y0 + y1, y0 - y1, -y1.
      const __m512 zero = _mm512_setzero_ps();
      const __m512 re[4] = {e0, _mm512_add_ps(e0, e1), _mm512_sub_ps(e0, e1), _mm512_sub_ps(zero, e1)};
      const __m512 ro[4] = {o0, _mm512_add_ps(o0, o1), _mm512_sub_ps(o0, o1), _mm512_sub_ps(zero, o1)};
      for (int i = 0; i < 4; ++i) {
        float* zi = z + (4 * i) * ld + ty * tw + tx;
        _mm512_mask_storeu_ps(zi, m, re[i]);
        _mm512_mask_storeu_ps(zi + ld, m, _mm512_add_ps(re[i], ro[i]));
        _mm512_mask_storeu_ps(zi + 2 * ld, m, _mm512_sub_ps(re[i], ro[i]));
        _mm512_mask_storeu_ps(zi + 3 * ld, m, _mm512_sub_ps(zero, ro[i]));
      }
    }
  }
}
#endif

// dL/dg = G^T du G for one filter: du is the 4x4 gradient of its transformed filter (point xi at
// du[xi * stride]); g is written as 3x3 values at g[(r * 3 + c) * g_stride].
//   G^T = | 1  1/2  1/2  0 |
//         | 0  1/2 -1/2  0 |
//         | 0  1/2  1/2  1 |
inline void weight_gradient(const float* du, int64_t stride, float* g, int64_t g_stride) {
  float t[3][4];  // G^T du
  for (int j = 0; j < 4; ++j) {
    const float d0 = du[j * stride], d1 = du[(4 + j) * stride], d2 = du[(8 + j) * stride], d3 = du[(12 + j) * stride];
    t[0][j] = d0 + 0.5f * (d1 + d2);
    t[1][j] = 0.5f * (d1 - d2);
    t[2][j] = 0.5f * (d1 + d2) + d3;
  }
  for (int r = 0; r < 3; ++r) {  // (G^T du) G
    g[(r * 3 + 0) * g_stride] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
    g[(r * 3 + 1) * g_stride] = 0.5f * (t[r][1] - t[r][2]);
    g[(r * 3 + 2) * g_stride] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
  }
}

}  // namespace demi::backend::cpu::winograd

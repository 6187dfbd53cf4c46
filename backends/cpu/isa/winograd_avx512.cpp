// The Winograd F(2x2, 3x3) transforms on AVX-512F (compiled with -mavx512f ...): whole rows of tiles
// 16 lanes at a time, masked edges, lane groups of small planes (layouts in winograd.h).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

void split_columns(const float* x, int64_t h, int64_t w, int64_t n, int64_t rows, float* e, float* o) {
  std::memset(e, 0, sizeof(float) * rows * n);  // std::fill here could be the copy baseline code links to
  std::memset(o, 0, sizeof(float) * rows * n);
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

// Lane g * tw + l (l < tw) of row r of the views is image g's padded column 2l - 1 (e0), 2l (o0),
// 2l + 1 (e1), 2l + 2 (o1), i.e. plane column 2l - 2 .. 2l + 1 of plane row r - 1: per image one
// load of the row (w <= 16) and one masked permute into each view's vector, then one store per
// view (a store per image and view, read back by whole-vector loads, stalled the transform).
// Lanes whose column is left of the plane (e0's first) or past 16 (o1's eighth, tw = 8) stay zero,
// columns past w are zeros of the load.
void split_lanes(const float* const* x, int64_t images, int64_t h, int64_t w, int64_t tw, int64_t rows, float* e0,
                 float* e1, float* o0, float* o1) {
  const int64_t lanes = images * tw;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i at[16];         // 2 (lane - g tw): the o0 index into image g's row
  __mmask16 own[16][3];   // image g's lanes for o0 and e1, for e0, for o1
  for (int64_t g = 0; g < images; ++g) {
    at[g] = _mm512_slli_epi32(_mm512_sub_epi32(lane, _mm512_set1_epi32(static_cast<int>(g * tw))), 1);
    own[g][0] = static_cast<__mmask16>(lane_mask(g * tw + tw) & ~lane_mask(g * tw));
    own[g][1] = static_cast<__mmask16>(own[g][0] & ~(1u << (g * tw)));
    own[g][2] = static_cast<__mmask16>(tw == 8 ? own[g][0] & ~(1u << (g * tw + 7)) : own[g][0]);
  }
  const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  const __mmask16 m = lane_mask(lanes), row_mask = lane_mask(w);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    __m512 ve0 = zero, vo0 = zero, ve1 = zero, vo1 = zero;
    if (r > 0 && r <= h) {
      for (int64_t g = 0; g < images; ++g) {
        const __m512 row = _mm512_maskz_loadu_ps(row_mask, x[g] + (r - 1) * w);
        ve0 = _mm512_mask_permutexvar_ps(ve0, own[g][1], _mm512_sub_epi32(at[g], one), row);
        vo0 = _mm512_mask_permutexvar_ps(vo0, own[g][0], at[g], row);
        ve1 = _mm512_mask_permutexvar_ps(ve1, own[g][0], _mm512_add_epi32(at[g], one), row);
        vo1 = _mm512_mask_permutexvar_ps(vo1, own[g][2], _mm512_add_epi32(at[g], two), row);
      }
    }
    _mm512_mask_storeu_ps(e0 + r * lanes, m, ve0), _mm512_mask_storeu_ps(o0 + r * lanes, m, vo0);
    _mm512_mask_storeu_ps(e1 + r * lanes, m, ve1), _mm512_mask_storeu_ps(o1 + r * lanes, m, vo1);
  }
}

// V for the tiles of a plane, or of a lane group of planes, from split columns: point xi of lane l
// of tile row ty goes to v[xi * ld + ty * lanes + l]. Row i of B^T d and then its columns are formed
// in registers (a row stored and reloaded one lane over stalls on store forwarding).
void transform_input(const SplitLanes& s, int64_t th, float* v, int64_t ld) {
  const int64_t lanes = s.lanes;
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int i = 0; i < 4; ++i) {
      // Row i of B^T d: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (rows of the padded plane from 2 ty).
      const int64_t a = (2 * ty + (i == 0 ? 0 : i == 2 ? 2 : 1)) * s.stride;
      const int64_t b = (2 * ty + (i == 0 ? 2 : i == 1 ? 2 : i == 2 ? 1 : 3)) * s.stride;
      auto row = [i](__m512 x, __m512 y) { return i == 1 ? _mm512_add_ps(x, y) : _mm512_sub_ps(x, y); };
      float* v0 = v + (4 * i) * ld + ty * lanes;
      for (int64_t l = 0; l < lanes; l += 16) {
        const __mmask16 m = lane_mask(lanes - l);
        // Columns 2tx .. 2tx + 3 of the row: e[tx], o[tx], e[tx + 1], o[tx + 1].
        const __m512 e0 = row(_mm512_maskz_loadu_ps(m, s.e0 + a + l), _mm512_maskz_loadu_ps(m, s.e0 + b + l));
        const __m512 o0 = row(_mm512_maskz_loadu_ps(m, s.o0 + a + l), _mm512_maskz_loadu_ps(m, s.o0 + b + l));
        const __m512 e1 = row(_mm512_maskz_loadu_ps(m, s.e1 + a + l), _mm512_maskz_loadu_ps(m, s.e1 + b + l));
        const __m512 o1 = row(_mm512_maskz_loadu_ps(m, s.o1 + a + l), _mm512_maskz_loadu_ps(m, s.o1 + b + l));
        _mm512_mask_storeu_ps(v0 + l, m, _mm512_sub_ps(e0, e1));
        _mm512_mask_storeu_ps(v0 + ld + l, m, _mm512_add_ps(o0, e1));
        _mm512_mask_storeu_ps(v0 + 2 * ld + l, m, _mm512_sub_ps(e1, o0));
        _mm512_mask_storeu_ps(v0 + 3 * ld + l, m, _mm512_sub_ps(o0, o1));
      }
    }
  }
}

// Output rows 0 and 1 of A^T m A + b for the tiles in the lanes of `mask`, point xi at p[xi * ld]:
// rows[r][0] the even output columns, rows[r][1] the odd ones.
void output_rows(const float* p, int64_t ld, __mmask16 mask, __m512 b, __m512 rows[2][2]) {
  __m512 s0[4], s1[4];  // rows 0 and 1 of A^T m, for each column j
  for (int j = 0; j < 4; ++j) {
    const __m512 m0 = _mm512_maskz_loadu_ps(mask, p + j * ld);
    const __m512 m1 = _mm512_maskz_loadu_ps(mask, p + (4 + j) * ld);
    const __m512 m2 = _mm512_maskz_loadu_ps(mask, p + (8 + j) * ld);
    const __m512 m3 = _mm512_maskz_loadu_ps(mask, p + (12 + j) * ld);
    s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
  }
  rows[0][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]), b);
  rows[0][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]), b);
  rows[1][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]), b);
  rows[1][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]), b);
}

// The first `count` (<= 32) values of even and odd interleaved, stored at out.
void store_interleaved(__m512 even, __m512 odd, float* out, int64_t count) {
  const __m512i first_pairs = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second_pairs = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  _mm512_mask_storeu_ps(out, lane_mask(count), _mm512_permutex2var_ps(even, first_pairs, odd));
  _mm512_mask_storeu_ps(out + 16, lane_mask(count - 16), _mm512_permutex2var_ps(even, second_pairs, odd));
}

// Output planes (oh x ow, ow <= 2 tw) of `images` images side by side in M's lanes (see "Lane
// groups"): point xi of lane l of tile row ty is m[xi * ld + ty * images * tw + l]; writes
// A^T m A + bias into y[g] (row stride ow) for image g. images > 1 needs images * tw <= 16.
void transform_output(const float* m, int64_t ld, int64_t oh, int64_t ow, int64_t th, int64_t tw, int64_t images,
                      float bias, float* const* y) {
  const __m512 b = _mm512_set1_ps(bias);
  const int64_t lanes = images * tw;
  __m512 rows[2][2];
  for (int64_t ty = 0; ty < th; ++ty) {
    const float* p = m + ty * lanes;
    if (images == 1) {  // a row of tiles in chunks of 16, stored straight into the plane
      for (int64_t tx = 0; tx < tw; tx += 16) {
        output_rows(p + tx, ld, lane_mask(tw - tx), b, rows);
        for (int r = 0; r < 2 && 2 * ty + r < oh; ++r)
          store_interleaved(rows[r][0], rows[r][1], y[0] + (2 * ty + r) * ow + 2 * tx, ow - 2 * tx);
      }
      continue;
    }
    output_rows(p, ld, lane_mask(lanes), b, rows);
    for (int r = 0; r < 2 && 2 * ty + r < oh; ++r) {
      alignas(64) float both[32];  // image g's output row at both[2 g tw], 2 tw values of which ow count
      store_interleaved(rows[r][0], rows[r][1], both, 32);
      for (int64_t g = 0; g < images; ++g) {
        const __mmask16 cols = lane_mask(ow);
        _mm512_mask_storeu_ps(y[g] + (2 * ty + r) * ow, cols, _mm512_maskz_loadu_ps(cols, both + 2 * g * tw));
      }
    }
  }
}

// The weight gradient of the same convolution: dL/dU = sum over tiles of (A dY A^T) . V, and
// dL/dg = G^T (dL/dU) G, with Z = A dY A^T laid out as V (lane groups, "Lane groups" above).
// First each output-gradient plane of a lane group is split by column parity into its lanes
// (split_grad_output), then Z comes from the group's split rows at once (transform_grad_output).

// e[y][lane0 + tx] = gy[y][2 tx], o[y][lane0 + tx] = gy[y][2 tx + 1] for the rows y < oh of one
// oh x ow plane (row stride `lanes`). The caller zeroes e and o (2 th rows each) first: tiles
// reaching beyond the plane read zeros.
void split_grad_output(const float* gy, int64_t oh, int64_t ow, int64_t lanes, int64_t lane0, float* e, float* o) {
  const __m512i even_lanes = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd_lanes = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t base = 0; base < ow; base += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(ow - base), gy + y * ow + base);
      const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(ow - base - 16), gy + y * ow + base + 16);
      const int64_t k = base / 2, at = y * lanes + lane0 + k;
      _mm512_mask_storeu_ps(e + at, lane_mask((ow + 1) / 2 - k), _mm512_permutex2var_ps(lo, even_lanes, hi));
      _mm512_mask_storeu_ps(o + at, lane_mask(ow / 2 - k), _mm512_permutex2var_ps(lo, odd_lanes, hi));
    }
  }
}

// As split_lanes for the output gradient: lane g * tw + l of row y is image g's column 2l (e) and
// 2l + 1 (o) of row y (ow <= 16, so no index passes the vector); one store per row and view.
void split_grad_lanes(const float* const* gy, int64_t images, int64_t oh, int64_t ow, int64_t tw, int64_t rows,
                      float* e, float* o) {
  const int64_t lanes = images * tw;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i at[16];        // 2 (lane - g tw): the e index into image g's row
  __mmask16 own[16];     // image g's lanes
  for (int64_t g = 0; g < images; ++g) {
    at[g] = _mm512_slli_epi32(_mm512_sub_epi32(lane, _mm512_set1_epi32(static_cast<int>(g * tw))), 1);
    own[g] = static_cast<__mmask16>(lane_mask(g * tw + tw) & ~lane_mask(g * tw));
  }
  const __m512i one = _mm512_set1_epi32(1);
  const __mmask16 m = lane_mask(lanes), row_mask = lane_mask(ow);
  for (int64_t y = 0; y < rows; ++y) {
    __m512 ve = _mm512_setzero_ps(), vo = _mm512_setzero_ps();
    if (y < oh) {
      for (int64_t g = 0; g < images; ++g) {
        const __m512 row = _mm512_maskz_loadu_ps(row_mask, gy[g] + y * ow);
        ve = _mm512_mask_permutexvar_ps(ve, own[g], at[g], row);
        vo = _mm512_mask_permutexvar_ps(vo, own[g], _mm512_add_epi32(at[g], one), row);
      }
    }
    _mm512_mask_storeu_ps(e + y * lanes, m, ve);
    _mm512_mask_storeu_ps(o + y * lanes, m, vo);
  }
}

// Z for th rows of tiles `lanes` wide from split rows e, o (2 th rows of `lanes`): point xi of lane l
// of tile row ty goes to z[xi * ld + ty * lanes + l].
//   A dY A^T with A^T = | 1 1  1  0 |: rows y0, y0 + y1, y0 - y1, -y1 of the 2x2 block, then the
//                       | 0 1 -1 -1 |  same combinations of its two columns.
void transform_grad_output(const float* e, const float* o, int64_t th, int64_t lanes, float* z, int64_t ld) {
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int64_t l = 0; l < lanes; l += 16) {
      const __mmask16 m = lane_mask(lanes - l);
      const float *row0 = e + 2 * ty * lanes + l, *row1 = e + (2 * ty + 1) * lanes + l;
      const __m512 e0 = _mm512_maskz_loadu_ps(m, row0), o0 = _mm512_maskz_loadu_ps(m, o + (row0 - e));
      const __m512 e1 = _mm512_maskz_loadu_ps(m, row1), o1 = _mm512_maskz_loadu_ps(m, o + (row1 - e));
      // Rows of A dY, split by column: (even, odd) for y0, y0 + y1, y0 - y1, -y1.
      const __m512 zero = _mm512_setzero_ps();
      const __m512 re[4] = {e0, _mm512_add_ps(e0, e1), _mm512_sub_ps(e0, e1), _mm512_sub_ps(zero, e1)};
      const __m512 ro[4] = {o0, _mm512_add_ps(o0, o1), _mm512_sub_ps(o0, o1), _mm512_sub_ps(zero, o1)};
      for (int i = 0; i < 4; ++i) {
        float* zi = z + (4 * i) * ld + ty * lanes + l;
        _mm512_mask_storeu_ps(zi, m, re[i]);
        _mm512_mask_storeu_ps(zi + ld, m, _mm512_add_ps(re[i], ro[i]));
        _mm512_mask_storeu_ps(zi + 2 * ld, m, _mm512_sub_ps(re[i], ro[i]));
        _mm512_mask_storeu_ps(zi + 3 * ld, m, _mm512_sub_ps(zero, ro[i]));
      }
    }
  }
}
}  // namespace

extern const Winograd kWinogradAvx512 = {16,           split_columns,     split_lanes,         transform_input,
                                         transform_output, split_grad_output, split_grad_lanes, transform_grad_output};

}  // namespace demi::backend::cpu::isa

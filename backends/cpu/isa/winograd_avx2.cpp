// The Winograd F(2x2, 3x3) transforms on AVX2 (compiled with -mavx2 -mfma): the AVX-512 file's
// arithmetic 8 lanes at a time; load_first / store_first (lane_mask.h) mask only partial vectors at
// the edges (layouts in winograd.h).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kLanes = 8;

// 16 values lo, hi -> their even-indexed ones (ev) and odd-indexed ones (od), in order.
void deinterleave(__m256 lo, __m256 hi, __m256& ev, __m256& od) {
  // shuffle_ps keeps 128-bit halves apart: [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6]; the 64-bit permute
  // puts the pairs in order.
  ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                                              _MM_SHUFFLE(3, 1, 2, 0)));
  od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                                              _MM_SHUFFLE(3, 1, 2, 0)));
}

void split_columns(const float* x, int64_t h, int64_t w, int64_t n, int64_t rows, float* e, float* o) {
  std::memset(e, 0, sizeof(float) * rows * n);
  std::memset(o, 0, sizeof(float) * rows * n);
  for (int64_t y = 0; y < h; ++y) {
    const float* src = x + y * w;
    float* er = e + (y + 1) * n;
    float* orow = o + (y + 1) * n;
    for (int64_t base = 0; base < w; base += 2 * kLanes) {
      __m256 ev, od;
      deinterleave(load_first(src + base, w - base), load_first(src + base + kLanes, w - base - kLanes), ev, od);
      const int64_t k = base / 2;
      store_first(orow + k, (w + 1) / 2 - k, ev);  // x[base + 2j] -> o[k + j]
      store_first(er + k + 1, w / 2 - k, od);      // x[base + 2j + 1] -> e[k + j + 1]
    }
  }
}

// As the AVX-512 file's, 8 lanes (w <= 8, tw <= 4): each image's permuted row blended into its lanes;
// a lane's column left of the plane (e0's first) or past 8 (o1's fourth, tw = 4) is left zero.
void split_lanes(const float* const* x, int64_t images, int64_t h, int64_t w, int64_t tw, int64_t rows, float* e0,
                 float* e1, float* o0, float* o1) {
  const int64_t lanes = images * tw;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i at[8];       // 2 (lane - g tw): the o0 index into image g's row
  __m256 own[8][3];    // image g's lanes (all bits set) for o0 and e1, for e0, for o1
  for (int64_t g = 0; g < images; ++g) {
    const __m256i first = _mm256_set1_epi32(static_cast<int>(g * tw)), rel = _mm256_sub_epi32(lane, first);
    at[g] = _mm256_slli_epi32(rel, 1);
    const __m256i mine = _mm256_andnot_si256(lane_mask(g * tw), lane_mask(g * tw + tw));
    own[g][0] = _mm256_castsi256_ps(mine);
    own[g][1] = _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpeq_epi32(rel, _mm256_setzero_si256()), mine));
    own[g][2] = _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpeq_epi32(rel, _mm256_set1_epi32(3)), mine));
  }
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    __m256 ve0 = zero, vo0 = zero, ve1 = zero, vo1 = zero;
    if (r > 0 && r <= h) {
      for (int64_t g = 0; g < images; ++g) {
        const __m256 row = load_first(x[g] + (r - 1) * w, w);
        ve0 = _mm256_blendv_ps(ve0, _mm256_permutevar8x32_ps(row, _mm256_sub_epi32(at[g], one)), own[g][1]);
        vo0 = _mm256_blendv_ps(vo0, _mm256_permutevar8x32_ps(row, at[g]), own[g][0]);
        ve1 = _mm256_blendv_ps(ve1, _mm256_permutevar8x32_ps(row, _mm256_add_epi32(at[g], one)), own[g][0]);
        vo1 = _mm256_blendv_ps(vo1, _mm256_permutevar8x32_ps(row, _mm256_add_epi32(at[g], two)), own[g][2]);
      }
    }
    store_first(e0 + r * lanes, lanes, ve0), store_first(o0 + r * lanes, lanes, vo0);
    store_first(e1 + r * lanes, lanes, ve1), store_first(o1 + r * lanes, lanes, vo1);
  }
}

void transform_input(const SplitLanes& s, int64_t th, float* v, int64_t ld) {
  const int64_t lanes = s.lanes;
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int i = 0; i < 4; ++i) {
      // Row i of B^T d: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (rows of the padded plane from 2 ty).
      const int64_t a = (2 * ty + (i == 0 ? 0 : i == 2 ? 2 : 1)) * s.stride;
      const int64_t b = (2 * ty + (i == 0 ? 2 : i == 1 ? 2 : i == 2 ? 1 : 3)) * s.stride;
      auto row = [i](__m256 x, __m256 y) { return i == 1 ? _mm256_add_ps(x, y) : _mm256_sub_ps(x, y); };
      float* v0 = v + (4 * i) * ld + ty * lanes;
      for (int64_t l = 0; l < lanes; l += kLanes) {
        const int64_t n = lanes - l;
        const __m256 e0 = row(load_first(s.e0 + a + l, n), load_first(s.e0 + b + l, n));
        const __m256 o0 = row(load_first(s.o0 + a + l, n), load_first(s.o0 + b + l, n));
        const __m256 e1 = row(load_first(s.e1 + a + l, n), load_first(s.e1 + b + l, n));
        const __m256 o1 = row(load_first(s.o1 + a + l, n), load_first(s.o1 + b + l, n));
        store_first(v0 + l, n, _mm256_sub_ps(e0, e1));
        store_first(v0 + ld + l, n, _mm256_add_ps(o0, e1));
        store_first(v0 + 2 * ld + l, n, _mm256_sub_ps(e1, o0));
        store_first(v0 + 3 * ld + l, n, _mm256_sub_ps(o0, o1));
      }
    }
  }
}

// Output rows 0 and 1 of A^T m A + b for the tiles in the first `valid` lanes: rows[r][0] the even
// output columns, rows[r][1] the odd ones.
void output_rows(const float* p, int64_t ld, int64_t valid, __m256 b, __m256 rows[2][2]) {
  __m256 s0[4], s1[4];
  for (int j = 0; j < 4; ++j) {
    const __m256 m0 = load_first(p + j * ld, valid), m1 = load_first(p + (4 + j) * ld, valid);
    const __m256 m2 = load_first(p + (8 + j) * ld, valid), m3 = load_first(p + (12 + j) * ld, valid);
    s0[j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
    s1[j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
  }
  rows[0][0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]), b);
  rows[0][1] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]), b);
  rows[1][0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]), b);
  rows[1][1] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]), b);
}

// The first `count` (<= 16) values of even and odd interleaved, stored at out.
void store_interleaved(__m256 even, __m256 odd, float* out, int64_t count) {
  const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);  // e0 o0 e1 o1 | e4 ..
  store_first(out, count, _mm256_permute2f128_ps(lo, hi, 0x20));
  store_first(out + kLanes, count - kLanes, _mm256_permute2f128_ps(lo, hi, 0x31));
}

// images > 1 needs images * tw <= 8.
void transform_output(const float* m, int64_t ld, int64_t oh, int64_t ow, int64_t th, int64_t tw, int64_t images,
                      float bias, float* const* y) {
  const __m256 b = _mm256_set1_ps(bias);
  const int64_t lanes = images * tw;
  __m256 rows[2][2];
  for (int64_t ty = 0; ty < th; ++ty) {
    const float* p = m + ty * lanes;
    if (images == 1) {
      for (int64_t tx = 0; tx < tw; tx += kLanes) {
        output_rows(p + tx, ld, tw - tx, b, rows);
        for (int r = 0; r < 2 && 2 * ty + r < oh; ++r)
          store_interleaved(rows[r][0], rows[r][1], y[0] + (2 * ty + r) * ow + 2 * tx, ow - 2 * tx);
      }
      continue;
    }
    output_rows(p, ld, lanes, b, rows);
    for (int r = 0; r < 2 && 2 * ty + r < oh; ++r) {
      alignas(32) float both[2 * kLanes];  // image g's output row at both[2 g tw]
      store_interleaved(rows[r][0], rows[r][1], both, 2 * kLanes);
      for (int64_t g = 0; g < images; ++g) store_first(y[g] + (2 * ty + r) * ow, ow, load_first(both + 2 * g * tw, ow));
    }
  }
}

void split_grad_output(const float* gy, int64_t oh, int64_t ow, int64_t lanes, int64_t lane0, float* e, float* o) {
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t base = 0; base < ow; base += 2 * kLanes) {
      __m256 ev, od;
      const float* src = gy + y * ow + base;
      deinterleave(load_first(src, ow - base), load_first(src + kLanes, ow - base - kLanes), ev, od);
      const int64_t k = base / 2, at = y * lanes + lane0 + k;
      store_first(e + at, (ow + 1) / 2 - k, ev);
      store_first(o + at, ow / 2 - k, od);
    }
  }
}

// As the AVX-512 file's, 8 lanes (ow <= 8): each image's permuted row blended into its lanes.
void split_grad_lanes(const float* const* gy, int64_t images, int64_t oh, int64_t ow, int64_t tw, int64_t rows,
                      float* e, float* o) {
  const int64_t lanes = images * tw;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i at[8];    // 2 (lane - g tw): the e index into image g's row
  __m256 own[8];    // image g's lanes (all bits set)
  for (int64_t g = 0; g < images; ++g) {
    at[g] = _mm256_slli_epi32(_mm256_sub_epi32(lane, _mm256_set1_epi32(static_cast<int>(g * tw))), 1);
    own[g] = _mm256_castsi256_ps(_mm256_andnot_si256(lane_mask(g * tw), lane_mask(g * tw + tw)));
  }
  const __m256i one = _mm256_set1_epi32(1);
  for (int64_t y = 0; y < rows; ++y) {
    __m256 ve = _mm256_setzero_ps(), vo = _mm256_setzero_ps();
    if (y < oh) {
      for (int64_t g = 0; g < images; ++g) {
        const __m256 row = load_first(gy[g] + y * ow, ow);
        ve = _mm256_blendv_ps(ve, _mm256_permutevar8x32_ps(row, at[g]), own[g]);
        vo = _mm256_blendv_ps(vo, _mm256_permutevar8x32_ps(row, _mm256_add_epi32(at[g], one)), own[g]);
      }
    }
    store_first(e + y * lanes, lanes, ve), store_first(o + y * lanes, lanes, vo);
  }
}

void transform_grad_output(const float* e, const float* o, int64_t th, int64_t lanes, float* z, int64_t ld) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t ty = 0; ty < th; ++ty) {
    for (int64_t l = 0; l < lanes; l += kLanes) {
      const int64_t n = lanes - l;
      const int64_t r0 = 2 * ty * lanes + l, r1 = (2 * ty + 1) * lanes + l;
      const __m256 e0 = load_first(e + r0, n), o0 = load_first(o + r0, n);
      const __m256 e1 = load_first(e + r1, n), o1 = load_first(o + r1, n);
      const __m256 re[4] = {e0, _mm256_add_ps(e0, e1), _mm256_sub_ps(e0, e1), _mm256_sub_ps(zero, e1)};
      const __m256 ro[4] = {o0, _mm256_add_ps(o0, o1), _mm256_sub_ps(o0, o1), _mm256_sub_ps(zero, o1)};
      for (int i = 0; i < 4; ++i) {
        float* zi = z + (4 * i) * ld + ty * lanes + l;
        store_first(zi, n, re[i]);
        store_first(zi + ld, n, _mm256_add_ps(re[i], ro[i]));
        store_first(zi + 2 * ld, n, _mm256_sub_ps(re[i], ro[i]));
        store_first(zi + 3 * ld, n, _mm256_sub_ps(zero, ro[i]));
      }
    }
  }
}

}  // namespace

extern const Winograd kWinogradAvx2 = {kLanes,           split_columns,     split_lanes,         transform_input,
                                       transform_output, split_grad_output, split_grad_lanes, transform_grad_output};

}  // namespace demi::backend::cpu::isa

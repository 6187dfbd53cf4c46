// The F(4x4, 3x3) column moves (isa.h's Winograd4) on AVX2 (compiled with -mavx2 -mfma), four tiles a
// step as 4x4 transposes of 128-bit rows; the AVX-512 levels share them (conv2d_winograd4.cpp's rows
// are 4-16 tiles, too short for wider vectors). Edges load masked and store with plain narrower stores
// (Zen runs masked stores as microcode: lane_mask.h).
#include <immintrin.h>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

// The first `valid` floats at p, the other lanes zero.
__m128 load4(const float* p, int64_t valid) {
  if (valid >= 4) return _mm_loadu_ps(p);
  const int v = valid < 0 ? 0 : static_cast<int>(valid);
  return _mm_maskload_ps(p, _mm_cmpgt_epi32(_mm_set1_epi32(v), _mm_setr_epi32(0, 1, 2, 3)));
}

// The first min(n, 4) lanes of v at p, nothing when n <= 0.
void store4(float* p, int64_t n, __m128 v) {
  if (n >= 4) {
    _mm_storeu_ps(p, v);
    return;
  }
  if (n >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), v);
    if (n == 3) _mm_store_ss(p + 2, _mm_movehl_ps(v, v));
  } else if (n == 1) {
    _mm_store_ss(p, v);
  }
}

void split_row(const float* line, int64_t tiles, float* views, int64_t stride) {
  const int64_t valid = 4 * tiles + 2;  // the values tile t's six columns 4 t .. 4 t + 5 read
  for (int64_t t = 0; t < tiles; t += 4) {
    // r[k]: columns 4 (t + k) .. + 3, lane c of r[k] is view c of tile t + k; r[k + 1]'s first two
    // lanes are views 4 and 5 of tile t + k.
    __m128 r[5];
    for (int k = 0; k < 5; ++k) r[k] = load4(line + 4 * (t + k), valid - 4 * (t + k));
    const __m128 a = _mm_unpacklo_ps(r[0], r[1]), b = _mm_unpacklo_ps(r[2], r[3]);  // 0 0' 1 1' ...
    const __m128 c = _mm_unpackhi_ps(r[0], r[1]), d = _mm_unpackhi_ps(r[2], r[3]);  // 2 2' 3 3' ...
    const __m128 e = _mm_unpacklo_ps(r[1], r[2]), f = _mm_unpacklo_ps(r[3], r[4]);
    const int64_t n = tiles - t;
    store4(views + t, n, _mm_movelh_ps(a, b));
    store4(views + stride + t, n, _mm_movehl_ps(b, a));
    store4(views + 2 * stride + t, n, _mm_movelh_ps(c, d));
    store4(views + 3 * stride + t, n, _mm_movehl_ps(d, c));
    store4(views + 4 * stride + t, n, _mm_movelh_ps(e, f));
    store4(views + 5 * stride + t, n, _mm_movehl_ps(f, e));
  }
}

void interleave_row(const float* runs, int64_t stride, int64_t w, float bias, float* y) {
  const int64_t tiles = (w + 3) / 4;
  const __m128 b = _mm_set1_ps(bias);
  for (int64_t t = 0; t < tiles; t += 4) {
    __m128 q0 = load4(runs + t, tiles - t), q1 = load4(runs + stride + t, tiles - t);
    __m128 q2 = load4(runs + 2 * stride + t, tiles - t), q3 = load4(runs + 3 * stride + t, tiles - t);
    _MM_TRANSPOSE4_PS(q0, q1, q2, q3);  // q_k: tile t + k's four columns
    store4(y + 4 * t, w - 4 * t, _mm_add_ps(q0, b));
    store4(y + 4 * t + 4, w - 4 * t - 4, _mm_add_ps(q1, b));
    store4(y + 4 * t + 8, w - 4 * t - 8, _mm_add_ps(q2, b));
    store4(y + 4 * t + 12, w - 4 * t - 12, _mm_add_ps(q3, b));
  }
}

}  // namespace

extern const Winograd4 kWinograd4Avx2 = {split_row, interleave_row};

}  // namespace demi::backend::cpu::isa

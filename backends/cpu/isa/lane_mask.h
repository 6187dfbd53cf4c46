// Masks for the first `valid` lanes of a vector, for the variant files' edge loads and stores.
// Included only by variant files; static, so that no copy compiled with one file's flags can be the
// one the linker gives another (each file gets the helpers for the ISA it is compiled for).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace demi::backend::cpu::isa {

#if defined(__AVX512F__)
static inline __mmask16 lane_mask(int64_t valid) {
  return valid >= 16 ? __mmask16(0xFFFF) : valid <= 0 ? __mmask16(0) : __mmask16((1u << valid) - 1);
}
// The same for the 32 lanes of 16-bit values in a vector (AVX512BW).
static inline __mmask32 lane_mask32(int64_t valid) {
  return valid >= 32 ? __mmask32(0xFFFFFFFFu) : valid <= 0 ? __mmask32(0) : __mmask32((1u << valid) - 1);
}
#elif defined(__AVX2__)
// Lanes [0, valid) of 8 set, for maskload / maskstore.
static inline __m256i lane_mask(int64_t valid) {
  const int v = valid < 0 ? 0 : valid > 8 ? 8 : static_cast<int>(valid);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// The first `valid` floats at p, the other lanes zero / untouched; a plain access when all 8 are
// valid. AMD's Zen cores run vmaskmovps stores as microcode, many times slower than vmovups: with
// every row of Winograd's transforms stored masked, SmallCNN's 32 -> 32 @ 32x32 forward spent 22%
// of its time on them (AVX2-only EPYC). Masked loads are cheap there, but plain ones cheaper still.
static inline __m256 load_first(const float* p, int64_t valid) {
  return valid >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(valid));
}
static inline void store_first(float* p, int64_t valid, __m256 v) {
  if (valid >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, lane_mask(valid), v);
  }
}
#endif

}  // namespace demi::backend::cpu::isa

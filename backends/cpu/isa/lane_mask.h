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
#endif

}  // namespace demi::backend::cpu::isa

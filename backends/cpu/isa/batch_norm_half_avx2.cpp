// Batch norm's half passes (isa.h, BatchNormHalf), compiled with -mavx2 -mfma -mf16c: the loops of
// batch_norm_half.h (fp16 through F16C), and `normalize` written out, whose ReLU
// and bf16 rounding GCC turns into a tangle of masks (1.25-1.4x the time of normalising into fp32
// and rounding after).
#include <immintrin.h>

#include "backends/cpu/isa/batch_norm_half.h"
#include "backends/cpu/isa/bf16_bits.h"

namespace demi::backend::cpu::isa {
namespace {

// fp16 through F16C, 8 values an instruction.
struct F16cCodec {
  static constexpr bool kInline = false;
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
  static uint16_t narrow(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static void widen_block(const uint16_t* x, float (&v)[kLanes]) {
    for (int j = 0; j < kLanes; j += 8) {
      _mm256_storeu_ps(v + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + j))));
    }
  }
  static void narrow_block(const float (&v)[kLanes], uint16_t* y) {
    for (int j = 0; j < kLanes; j += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(v + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
};

// y of 8 widened values, with values below -relu_band as +0 when relu.
inline __m256 normalized8(__m256 v, const BnNorm& k, bool relu, float relu_band) {
  v = _mm256_sub_ps(_mm256_sub_ps(v, _mm256_set1_ps(k.hi)), _mm256_set1_ps(k.lo));
  v = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(k.scale)), _mm256_set1_ps(k.shift));
  return relu ? _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-relu_band), _CMP_LT_OQ), v) : v;
}

void normalize_bf16(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const bool relu = relu_band >= 0;
  auto half = [&](const uint16_t* p) {  // 8 values normalised and rounded, bf16 bits in each lane's low half
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 v = normalized8(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), k, relu, relu_band);
    return _mm256_srli_epi32(_mm256_castps_si256(bf16_rounded(v)), 16);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed = _mm256_packus_epi32(half(x + i), half(x + i + 8));  // lanes 0-3 8-11 4-7 12-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  bn_normalize<Bf16Codec>(x + i, y + i, n - i, k, relu_band);
}

void normalize_f16(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = normalized8(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))), k, relu,
                                 relu_band);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  bn_normalize<F16cCodec>(x + i, y + i, n - i, k, relu_band);
}

}  // namespace

extern const BatchNormHalf kBatchNormBf16Avx2 = batch_norm_half_table<Bf16Codec>(normalize_bf16);
extern const BatchNormHalf kBatchNormF16Avx2 = batch_norm_half_table<F16cCodec>(normalize_f16);

}  // namespace demi::backend::cpu::isa

// Batch norm's half passes (isa.h, BatchNormHalf), compiled with -mavx512f ...: the loops of
// batch_norm_half.h (fp16 through F16C), and `normalize` written out, 16 values a step (as
// compiled from the loop, the ReLU and the bf16 rounding took more instructions than the two steps
// of normalising into fp32 and rounding after).
#include <immintrin.h>

#include "backends/cpu/isa/batch_norm_half.h"
#include "backends/cpu/isa/bf16_bits.h"

namespace demi::backend::cpu::isa {
namespace {

// fp16 through F16C, 16 values an instruction. As wide as the loops' vectors: a
// block stored as two 256-bit halves and read back as one 512-bit vector stalls on store
// forwarding (2.8-3.2x the time).
struct F16cCodec {
  static constexpr bool kInline = false;
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
  static uint16_t narrow(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static void widen_block(const uint16_t* x, float (&v)[kLanes]) {
    for (int j = 0; j < kLanes; j += 16) {
      _mm512_storeu_ps(v + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j))));
    }
  }
  static void narrow_block(const float (&v)[kLanes], uint16_t* y) {
    for (int j = 0; j < kLanes; j += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j),
                          _mm512_cvtps_ph(_mm512_loadu_ps(v + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
};

// y of 16 widened values, with values below -relu_band as +0 when relu.
inline __m512 normalized16(__m512 v, const BnNorm& k, bool relu, float relu_band) {
  v = _mm512_sub_ps(_mm512_sub_ps(v, _mm512_set1_ps(k.hi)), _mm512_set1_ps(k.lo));
  v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(k.scale)), _mm512_set1_ps(k.shift));
  if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_set1_ps(-relu_band), _CMP_LT_OQ), _mm512_setzero_ps());
  return v;
}

void normalize_bf16(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m512 v = normalized16(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), k, relu, relu_band);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bf16_bits(v));
  }
  bn_normalize<Bf16Codec>(x + i, y + i, n - i, k, relu_band);
}

void normalize_f16(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band) {
  const bool relu = relu_band >= 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = normalized16(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))), k,
                                  relu, relu_band);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  bn_normalize<F16cCodec>(x + i, y + i, n - i, k, relu_band);
}

}  // namespace

extern const BatchNormHalf kBatchNormBf16Avx512 = batch_norm_half_table<Bf16Codec>(normalize_bf16);
extern const BatchNormHalf kBatchNormF16Avx512 = batch_norm_half_table<F16cCodec>(normalize_f16);

}  // namespace demi::backend::cpu::isa

// The bf16 GEMM tile on AMX-BF16 (compiled with -mamx-tile -mamx-bf16 -mavx512f ...): a 32 x 32 fp32
// block of C in four 16 x 16 tile registers, fed by two A tiles (16 rows x 32 bf16 of k) and two B
// tiles (16 pairs of k x 16 columns) per 32 steps of k; tdpbf16ps sums exact bf16 products in
// fp32. The block is stored to the stack and added to C (with init or accumulate) under AVX-512
// masks, or rounded to bf16 into c_bf16. Every thread loads the tile configuration (`prepare`)
// before its first tile.
#include <immintrin.h>

#include "backends/cpu/isa/bf16_bits.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/isa/lane_mask.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kRows = 32, kCols = 32, kK = 32;

// The 64-byte tile configuration (palette 1): tiles 0-3 hold C, 4-5 A, 6-7 B; all 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Constant data rather than a local: GCC 12 drops a local's stores before ldtilecfg, whose asm
// operand does not tell it the bytes are read.
alignas(64) const TileConfig kConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

void prepare() { _tile_loadconfig(&kConfig); }

void tile(const Bf16TileArgs& t) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t a_stride = t.lda * 2, b_stride = t.ldb * 2;  // bytes
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const uint16_t* a_low = t.a + tap * t.kp;
    const uint16_t* a_high = a_low + 16 * t.lda;
    const uint16_t* b_tap = t.b + (t.b_offsets ? t.b_offsets[tap] : 0);
    for (int64_t k = 0; k < t.kp; k += kK) {
      const uint16_t* b = b_tap + (k / 2) * t.ldb;
      _tile_loadd(4, a_low + k, a_stride);
      _tile_loadd(6, b, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, b + 32, b_stride);  // columns 16-31: 16 pairs further along the row
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a_high + k, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float block[4][16][16];  // [2 * row half + column half][row][column]
  _tile_stored(0, block[0], 64);
  _tile_stored(1, block[1], 64);
  _tile_stored(2, block[2], 64);
  _tile_stored(3, block[3], 64);
  const __mmask16 mask[2] = {lane_mask(t.cols), lane_mask(t.cols - 16)};
  for (int64_t r = 0; r < t.rows; ++r) {
    const __m512 start = t.init && !t.accumulate ? _mm512_set1_ps(t.init[r]) : _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      __m512 sum = _mm512_add_ps(_mm512_load_ps(block[2 * (r / 16) + h][r % 16]), start);
      if (t.c_bf16) {
        _mm256_mask_storeu_epi16(t.c_bf16 + r * t.ldc + 16 * h, mask[h], bf16_bits(sum));
        continue;
      }
      float* out = t.c + r * t.ldc + 16 * h;
      if (t.accumulate) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask[h], out));
      _mm512_mask_storeu_ps(out, mask[h], sum);
    }
  }
}

}  // namespace

extern const Bf16Gemm kBf16Amx = {kRows, kCols, kK, prepare, tile, gather_taps_avx512, im2col16_avx512};

}  // namespace demi::backend::cpu::isa

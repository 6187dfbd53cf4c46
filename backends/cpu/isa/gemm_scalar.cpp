// Plain C++ GEMM tiles: the oracle the vector tiles are tested against, and the `scalar` level.
// Same contracts as the vector entries (isa.h), any tile shape; the bf16 tile takes kb = 32, as
// AMX does, so that the bf16 walk's k padding runs on every machine. Also the bf16 table's gather
// and 16-bit im2col as plain loops.
#include <cstring>

#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

constexpr int64_t kMr = 8, kNr = 16;         // fp32 tile (the dot tile takes any block: 4 x 4)
constexpr int64_t kBfMr = 16, kBfNr = 16;    // bf16 tile

void f32_tile(const F32TileArgs& t) {
  float acc[kMr][kNr];
  for (int64_t r = 0; r < kMr; ++r) {
    const float start = t.init && !t.accumulate && r < t.rows ? t.init[r] : 0.0f;
    for (int64_t c = 0; c < kNr; ++c) acc[r][c] = start;
  }
  for (int64_t j = 0; j < t.k; ++j) {
    const float* brow = t.b + j * t.ldb;
    for (int64_t r = 0; r < t.rows; ++r) {
      const float a = t.a_panel[j * kMr + r];
      for (int64_t c = 0; c < t.cols; ++c) acc[r][c] += a * brow[c];
    }
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    float* out = t.c + r * t.ldc;
    for (int64_t c = 0; c < t.cols; ++c) out[c] = t.accumulate ? out[c] + acc[r][c] : acc[r][c];
  }
}

void transpose(const float* src, int64_t src_stride, int64_t m, int64_t n, float* dst, int64_t dst_stride) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

void dot_tile(const F32DotArgs& t) {
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = 0; c < t.cols; ++c) {
      float sum = 0.0f;
      for (int64_t j = 0; j < t.k; ++j) sum += t.a[r * t.lda + j] * t.b[c * t.ldb + j];
      float& out = t.c[r * t.ldc + c];
      out = t.accumulate ? out + sum : sum;
    }
  }
}

float bf16_value(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// Each bf16 x bf16 product is exact in fp32; the sum is fp32, pair by pair as vdpbf16ps adds them.
void bf16_tile(const Bf16TileArgs& t) {
  float acc[kBfMr][kBfNr];
  for (int64_t r = 0; r < kBfMr; ++r) {
    const float start = t.init && !t.accumulate && r < t.rows ? t.init[r] : 0.0f;
    for (int64_t c = 0; c < kBfNr; ++c) acc[r][c] = start;
  }
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const uint16_t* a = t.a + tap * t.kp;
    const uint16_t* b = t.b + (t.b_offsets ? t.b_offsets[tap] : 0);
    for (int64_t j = 0; j < t.kp / 2; ++j) {
      const uint16_t* brow = b + j * t.ldb;
      for (int64_t r = 0; r < t.rows; ++r) {
        const float a0 = bf16_value(a[r * t.lda + 2 * j]), a1 = bf16_value(a[r * t.lda + 2 * j + 1]);
        for (int64_t c = 0; c < t.cols; ++c) {
          acc[r][c] += a1 * bf16_value(brow[2 * c + 1]);
          acc[r][c] += a0 * bf16_value(brow[2 * c]);
        }
      }
    }
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    if (t.c_bf16) {
      kConvertScalar.f32_to_bf16(acc[r], t.c_bf16 + r * t.ldc, t.cols);
      continue;
    }
    float* out = t.c + r * t.ldc;
    for (int64_t c = 0; c < t.cols; ++c) out[c] = t.accumulate ? out[c] + acc[r][c] : acc[r][c];
  }
}

void gather_taps(const uint32_t* src, const int64_t* offsets, int64_t taps, const int32_t* at, int64_t n, uint32_t* dst,
                 int64_t dst_stride) {
  for (int64_t t = 0; t < taps; ++t) {
    for (int64_t q = 0; q < n; ++q) dst[t * dst_stride + q] = src[offsets[t] + at[q]];
  }
}

void im2col16(const uint16_t* x, int64_t channels, int64_t plane_stride, const Im2colPlan& plan, uint16_t* col,
              int64_t ld) {
  for (int64_t c = 0; c < channels; ++c) {
    const uint16_t* plane = x + c * plane_stride;
    for (int64_t t = 0; t < plan.taps; ++t) {
      uint16_t* row = col + (c * plan.taps + t) * ld;
      const uint16_t* index = plan.index + t * Im2colPlan::kMaxValues;
      for (int64_t p = 0; p < plan.n_out; ++p) row[p] = (plan.keep[t] >> p & 1) ? plane[index[p]] : uint16_t(0);
    }
  }
}

}  // namespace

extern const F32Gemm kGemmScalar = {kMr, kNr, f32_tile, transpose, 4, 4, dot_tile, false};
extern const Bf16Gemm kBf16Scalar = {kBfMr, kBfNr, 32, nullptr, bf16_tile, gather_taps, im2col16};

}  // namespace demi::backend::cpu::isa

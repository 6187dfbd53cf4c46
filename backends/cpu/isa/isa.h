// The CPU backend's microkernels, one table of function pointers per ISA level, chosen once at
// start-up from cpuid (select.cpp). Each variant file (isa/<family>_<isa>.cpp) is compiled with its
// own flags and fills one part of a table; the algorithms (walks, packing, Winograd order) live
// above, in backends/cpu, and take their tile shapes from the table.
//
// Only types and declarations here, no inline functions: this header is included by TUs compiled
// with AVX-512 and AMX flags, and an inline function instantiated there could be the copy the
// linker keeps for baseline TUs too (SIGILL on an AVX2 machine). Half values are uint16_t bits.
#pragma once

#include <cstdint>

namespace demi::backend::cpu::isa {

// Ordered: each level needs everything the ones below it need.
enum class Level { Scalar, Avx2, Avx512, Avx512Bf16, Amx };
constexpr int kNumLevels = 5;

// The packed fp32 GEMM (packed_gemm.h): one tile of C (rows <= mr, cols <= nr valid) = init (one value
// per row, or 0) + A (one panel: mr values per step of k, packed) * B (k rows, row stride ldb);
// with `accumulate`, C += A * B (summed in registers first, then added to C once).
struct F32TileArgs {
  const float* a_panel;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t k, rows, cols;
  const float* init;
  bool accumulate;
};
// The fp32 "dot" tile (packed_gemm::gemm_nt): one strip of C (rows <= dr valid, any number of
// cols, in blocks of dc) = sum over k of A[r][k] B[c][k], or C += that with `accumulate`, where
// both operands keep k contiguous (row r of A at a + r * lda, row c of B at b + c * ldb; no
// packing). Backward-weight's products have this shape (Winograd's V Z^T, im2col's col grad_y^T):
// the tile above needs one of them transposed, which took a quarter of a 3x3 layer's
// backward-weight.
struct F32DotArgs {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t k, rows, cols;
  bool accumulate;
};
struct F32Gemm {
  int64_t mr, nr;  // rows of A per packed panel, widest column tile
  void (*tile)(const F32TileArgs& args);
  // dst[j * dst_stride + i] = src[i * src_stride + j] for an m x n src (also moves 32-bit pairs of
  // bf16 values: the entries only move bits).
  void (*transpose)(const float* src, int64_t src_stride, int64_t m, int64_t n, float* dst, int64_t dst_stride);
  int64_t dr, dc;  // rows and columns of the dot tile's block
  void (*dot_tile)(const F32DotArgs& args);
  // Whether CpuKernels::gemm's fp32 products (matmul, linear; gemm.cpp's on_tile picks which) run on
  // this tile rather than Eigen's GEMM, which the library builds for its baseline, AVX2: true where
  // the tile is wider (AVX-512, 1.6x Eigen at 1024^3 on the AMX Xeon); the AVX2 tile ran at
  // 0.87-0.97x Eigen's.
  bool matmuls;
};

// Winograd F(2x2, 3x3) transforms (winograd.h has the layouts). `lanes` is the vector width in
// floats: lane groups of small planes fill it (images * tw <= lanes).
struct SplitLanes {
  const float *e0, *e1, *o0, *o1;
  int64_t stride, lanes;
};
struct Winograd {
  int64_t lanes;
  void (*split_columns)(const float* x, int64_t h, int64_t w, int64_t n, int64_t rows, float* e, float* o);
  // Lane groups (images > 1, so w <= 2 tw <= lanes): the h x w planes x[g] of `images` images split
  // straight into the group's four views e0, e1, o0, o1 (each rows x lanes, lanes = images * tw), image
  // g in lanes g * tw .. g * tw + tw - 1; every row of them written (padding rows and columns as zeros).
  void (*split_lanes)(const float* const* x, int64_t images, int64_t h, int64_t w, int64_t tw, int64_t rows,
                      float* e0, float* e1, float* o0, float* o1);
  void (*transform_input)(const SplitLanes& s, int64_t th, float* v, int64_t ld);
  void (*transform_output)(const float* m, int64_t ld, int64_t oh, int64_t ow, int64_t th, int64_t tw, int64_t images,
                           float bias, float* const* y);
  void (*split_grad_output)(const float* gy, int64_t oh, int64_t ow, int64_t lanes, int64_t lane0, float* e, float* o);
  // Lane groups (images > 1, ow <= 2 tw <= lanes): the oh x ow output-gradient planes gy[g] split by
  // column parity straight into the group's rows (e, o: rows x lanes, lanes = images * tw; image g in
  // lanes g * tw ..), every row written (zeros past the planes).
  void (*split_grad_lanes)(const float* const* gy, int64_t images, int64_t oh, int64_t ow, int64_t tw, int64_t rows,
                           float* e, float* o);
  void (*transform_grad_output)(const float* e, const float* o, int64_t th, int64_t lanes, float* z, int64_t ld);
};

// Winograd F(4x4, 3x3)'s column moves (conv2d_winograd4.cpp): its 6-wide input tiles step by 4
// columns, so a zero-padded row splits into six views, one value per tile each, and an output row is
// its tiles' four column runs interleaved.
struct Winograd4 {
  // views[j * stride + t] = line[4 t + j] for j < 6, t < tiles (line holds 4 tiles + 2 values).
  void (*split_row)(const float* line, int64_t tiles, float* views, int64_t stride);
  // y[x] = runs[(x % 4) * stride + x / 4] + bias for x < w.
  void (*interleave_row)(const float* runs, int64_t stride, int64_t w, float bias, float* y);
};

// half <-> fp32 for n values; to half rounds to nearest even (NaN stays NaN, fp16 overflows to inf).
struct Convert {
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
};

// GELU's normal CDF, Phi(x) = erfc(-x / sqrt 2) / 2, with erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 +
// z / 2) (Numerical Recipes' erfcc: relative error < 1.2e-7 everywhere; 1 + erf(x / sqrt 2) would
// cancel for negative x), and the PDF phi(x), evaluated in double so that rounding adds nothing
// visible in fp32. cdf[i] = Phi(x[i]); pdf[i] = phi(x[i]) when pdf is not null.
// normal_cdf_pdf_half: the same for results that are rounded to fp16 or bf16 next, within a
// relative 2^-17 of normal_cdf_pdf (fp16 keeps 11 bits). The AVX2 and AVX-512 levels evaluate it in
// fp32, 8 or 16 values a vector (the double kernel was a tenth of an AirNet bf16 step on AVX-512);
// the scalar level points it at normal_cdf_pdf.
// gelu_half: GELU for values that a half type stores, in fp32: with h(v) = v rounded to `type` and
// widened back, x' = h(x[i]) with round_x, else x[i]; y[i] = x' Phi(x'), or with g, g[i] * fma(x',
// phi(x'), Phi(x')), Phi and phi as normal_cdf_pdf_half gives them; rounded by h with round_y. y may
// be x or g. Batch norm's fused GELU rounds its fp32 y first, and its backward keeps the rounded
// gradient: as passes of their own over fp32 blocks, around the CDF kernel, those roundings were
// 13-16% of a bf16 batch norm + GELU. AVX-512 does them in registers; AVX2, short of registers, in
// passes over L1 blocks inside the entry (gelu_avx2.cpp).
enum class HalfType { Bf16, F16 };
struct Gelu {
  void (*normal_cdf_pdf)(const float* x, float* cdf, float* pdf, int64_t n);
  void (*normal_cdf_pdf_half)(const float* x, float* cdf, float* pdf, int64_t n);
  void (*gelu_half)(const float* x, const float* g, float* y, int64_t n, HalfType type, bool round_x, bool round_y);
};
// P's coefficients, lowest power first, and the constants every variant uses.
constexpr double kGeluErfc[10] = {-1.26551223, 1.00002368, 0.37409196,  0.09678418, -0.18628806,
                                  0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
constexpr double kGeluSqrtHalf = 0.70710678118654752440, kGeluInvSqrt2Pi = 0.39894228040143267794;
// Q(t) = exp(P(t)) as one polynomial, lowest power first (least-squares Chebyshev fit on [0, 1]
// turned into powers; relative error < 4.2e-11 against exp(P(t)) in double), so that erfc(z) =
// t Q(t) exp(-z^2) and the vector kernels' CDF and PDF share one exp(-z^2) where both are asked
// for (GELU's backward: 18-25% faster with one exp fewer). The CDF alone keeps exp(P(t) - z^2).
constexpr double kGeluExpP[15] = {0.282094761725158,    0.282101442649809,   0.24658334837396642,
                                  0.1798569575565651,   0.05894280132788933, 0.09046409142000657,
                                  -0.2602055343273167,  0.18062442197301037, -0.1541065150563459,
                                  0.25428952597487614,  -0.4222993918993392, 0.5367573162216869,
                                  -0.4164090103771626,  0.1677592950333447,  -0.02645348063767564};

// The bf16 GEMM (packed_gemm_bf16.h): one tile of fp32 C (rows <= mr, cols <= nr valid) = init +
// A * B, or C += A * B, with bf16 products summed in fp32. A: mr rows of kp bf16 (row r at
// a + r * lda, zero past k and past the valid rows); B: kp / 2 rows of bf16 pairs, "VNNI" order
// (row j holds (B[2j][n], B[2j + 1][n]) for each column n; row stride ldb bf16), readable for
// ceil(cols / nr) * nr columns, zero in the rows past k. kp is a multiple of kb.
// With taps > 1 (implicit convolutions, conv2d_implicit.cpp) C sums `taps` such products: product t
// takes A's columns [t * kp, (t + 1) * kp) and its B at b + b_offsets[t]. With c_bf16 set, C goes
// there instead of to c, rounded once to bf16 (init included; row stride ldc; not with accumulate).
struct Bf16TileArgs {
  const uint16_t* a;
  int64_t lda;
  const uint16_t* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t kp, rows, cols;
  const float* init;
  bool accumulate;
  int64_t taps;
  const int64_t* b_offsets;  // taps entries, or nullptr when taps == 1
  uint16_t* c_bf16;
};
// The B strip rows of one channel pair of a gathered implicit convolution (conv2d_implicit.cpp), in
// 32-bit words (pairs of bf16): dst[t * dst_stride + q] = src[offsets[t] + at[q]] for t < taps, q < n.
using GatherTaps = void (*)(const uint32_t* src, const int64_t* offsets, int64_t taps, const int32_t* at, int64_t n,
                            uint32_t* dst, int64_t dst_stride);
// im2col of planes of at most 64 16-bit values into rows of at most 64 (bf16 backward-weight on
// AirNet's 7x7 and 3x3 planes, where copying each tap's few values one call at a time cost as much
// as the tile): every output of tap t is one input value or zero, so the plan lists, per tap, the
// input position of each output (`index`, kMaxValues entries a tap) and which outputs keep theirs
// (bit p of `keep[t]`; the others are 0). For c < channels, row t of channel c, col + (c * taps + t)
// * ld, gets n_out values from the plane at x + c * plane_stride (n_in values).
struct Im2colPlan {
  static constexpr int64_t kMaxValues = 64;
  int64_t taps, n_in, n_out;
  const uint16_t* index;
  const uint64_t* keep;
};
using Im2col16 = void (*)(const uint16_t* x, int64_t channels, int64_t plane_stride, const Im2colPlan& plan,
                          uint16_t* col, int64_t ld);
struct Bf16Gemm {
  int64_t mr, nr, kb;  // tile rows and columns, granularity of k
  void (*prepare)();   // once per thread before a run of tiles (AMX: loads the tile configuration)
  void (*tile)(const Bf16TileArgs& args);
  GatherTaps gather_taps;
  Im2col16 im2col16;
};
// The AVX-512 gather and im2col (gather_avx512.cpp), which the avx512_bf16 and amx levels share.
void gather_taps_avx512(const uint32_t* src, const int64_t* offsets, int64_t taps, const int32_t* at, int64_t n,
                        uint32_t* dst, int64_t dst_stride);
void im2col16_avx512(const uint16_t* x, int64_t channels, int64_t plane_stride, const Im2colPlan& plan, uint16_t* col,
                     int64_t ld);

// Which bf16 GEMMs take the bf16 tile; the others widen bf16 into the fp32 tile (or Eigen's GEMM).
// Winograd's 3x3 convolutions do 2.25x fewer multiplies in fp32, and their transformed operands are
// not bf16 values (rounding them would add a rounding the half contract does not allow), so the
// direct bf16 GEMM must beat fp32 Winograd, transforms included: AMX does by far, and so does Zen
// 4's vdpbf16ps at twice the fp32 rate (docs/BENCHMARKS.md).
enum class Bf16Route {
  Widen,        // the tile is not faster than fp32 here (measured: docs/BENCHMARKS.md)
  NonWinograd,  // matmul, linear and the convolutions Winograd does not take
  Everything,   // every bf16 GEMM and convolution (AMX, vdpbf16ps on AMD; `scalar`, to test the walk)
};

// Batch norm's passes over the planes of a half type (bf16 or fp16, as bits), read and written as
// half values and widened and rounded in registers (batch_norm*.cpp): widening a channel into an
// fp32 buffer first and rounding from one after took a bf16 forward five passes over memory where
// these take three. The same loops for every level (batch_norm_half.h), so every level gives the
// same bits. Arithmetic is separately rounded (no contraction): the fused ReLU's backward re-derives
// the forward's y.
struct BnNorm {
  float hi, lo, scale, shift;  // y = ((x - hi) - lo) * scale + shift
};
// Which gradient values a fused ReLU lets through: where x > t (side 1), x < t (side -1), or where
// y > band recomputed from x (side 0); kNone: all of them.
struct BnReluMask {
  static constexpr int kNone = 2;
  int side;
  float t;
  BnNorm k;
  float band;
};
// A channel's planes of an NCHW half tensor: plane p of hw values at data + p * stride.
struct BnPlanes {
  const uint16_t* data;
  int64_t planes, hw, stride;
};
struct BatchNormHalf {
  // sum(x) in double: 32 lanes across the planes, added pairwise at the end.
  double (*sum)(const BnPlanes& x);
  // sum(((x - hi) - lo)^2): 32 fp32 lanes within a plane, added into 32 double lanes after each.
  double (*sum_squared_deviations)(const BnPlanes& x, float hi, float lo);
  // y = round(((x - hi) - lo) * scale + shift) for one plane of n values; with relu_band >= 0,
  // y < -relu_band is stored as 0.
  void (*normalize)(const uint16_t* x, uint16_t* y, int64_t n, const BnNorm& k, float relu_band);
  // With g masked (plane p of g at g + p * g_stride): sum(g) as `sum` does, and sum(g * (x - mean))
  // as `sum_squared_deviations` does.
  void (*gradient_sums)(const BnPlanes& x, const uint16_t* g, int64_t g_stride, float mean, const BnReluMask& mask,
                        double* sum_g, double* sum_gd);
  // gx = round((g masked) * k_g + (x - mean) * k_d + k_0) for one plane of n values.
  void (*grad_input)(const uint16_t* x, const uint16_t* g, uint16_t* gx, int64_t n, float mean,
                     const BnReluMask& mask, float k_g, float k_d, float k_0);
};

struct Table {
  Level level;
  const char* name;
  F32Gemm gemm;
  Winograd winograd;
  Winograd4 winograd4;
  Convert convert;
  Gelu gelu;
  Bf16Gemm bf16;  // tile == nullptr: no bf16 tile at this level
  Bf16Route bf16_route;
  BatchNormHalf batch_norm_bf16, batch_norm_f16;
};

// The table in use: chosen on first use from cpuid, lowered by DEMI_CPU_ISA. Throws demi::Error
// when DEMI_CPU_ISA names an unknown level or one this CPU (or OS) lacks.
const Table& active();
// The table of a level, or nullptr when this build or this CPU lacks it (then *missing, when
// given, names what is missing).
const Table* table(Level level, const char** missing = nullptr);
const char* level_name(Level level);
// Makes `level` the active table until the returned previous level is set back (tests run each
// kernel once per level this way), with DEMI_CPU_BF16_ROUTE applied where the level has a bf16 tile.
// Throws like DEMI_CPU_ISA when the CPU lacks it.
Level set_active_for_testing(Level level);

// The entries each variant file provides.
extern const F32Gemm kGemmScalar, kGemmAvx2, kGemmAvx512;
extern const Winograd kWinogradScalar, kWinogradAvx2, kWinogradAvx512;
extern const Winograd4 kWinograd4Scalar, kWinograd4Avx2;  // the AVX-512 levels share AVX2's
extern const Convert kConvertScalar, kConvertAvx2, kConvertAvx512;
extern const Gelu kGeluScalar, kGeluAvx2, kGeluAvx512;
extern const Bf16Gemm kBf16Scalar, kBf16Avx512Bf16, kBf16Amx;
extern const BatchNormHalf kBatchNormBf16Scalar, kBatchNormBf16Avx2, kBatchNormBf16Avx512;
extern const BatchNormHalf kBatchNormF16Scalar, kBatchNormF16Avx2, kBatchNormF16Avx512;
// gemm_avx2.cpp's 8x8- and 4x8-block transpose (256-bit AVX), which the AVX-512 table shares.
void transpose_avx2(const float* src, int64_t src_stride, int64_t m, int64_t n, float* dst, int64_t dst_stride);

}  // namespace demi::backend::cpu::isa

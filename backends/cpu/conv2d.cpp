// CpuKernels::conv2d_*: NCHW convolution as im2col + GEMM, images spread over threads, in chunks of
// output rows or groups of small images. The GEMMs are packed_gemm.h's, with the tile of the ISA
// level in use (isa/), and 3x3 / stride 1 / padding 1 convolutions run all three passes as Winograd
// F(2x2, 3x3) (winograd.h), or for bf16 results whose error allows, F(4x4, 3x3) in forward and
// backward-data (conv2d_winograd4.h). fp16 (and bf16 without a bf16 tile) is widened to fp32 on the
// way in and rounded once on output; bf16 with a bf16 tile (AMX, AVX512_BF16) stays bf16 into the
// tile, and its stride-1 forward and backward-data passes run as implicit GEMMs (conv2d_implicit.h,
// no im2col).
// fp64 (gradcheck) runs im2col + Eigen. backward_data is GEMM + col2im; backward_weight sums per
// thread.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_implicit.h"
#include "backends/cpu/conv2d_walk.h"
#include "backends/cpu/conv2d_winograd4.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/winograd.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

using namespace conv2d_walk;

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;

// Output columns [begin, end) whose input column ox * stride - pad + k falls inside [0, size).
void valid_range(int64_t size, int64_t out, int64_t stride, int64_t pad, int64_t k, int64_t& begin,
                 int64_t& end) {
  begin = std::clamp<int64_t>(ceil_div(pad - k, stride), 0, out);
  end = std::clamp<int64_t>(ceil_div(size + pad - k, stride), begin, out);
}

// Output rows are processed in chunks whose column matrix (kChunkBytes or less, half of a Zen 3
// core's L2) stays in cache between im2col writing it and the GEMM packing it; on SmallCNN this
// beat whole-image column matrices and smaller chunks.
constexpr int64_t kChunkBytes = 256 * 1024;

// Zeroes columns [0, ox0) and [ox1, ow) of rows [y0, y1) of a row-major block of width ow: the
// padding columns, one or two per row, written column by column rather than by a memset call each.
template <typename Acc>
void zero_columns(Acc* block, int64_t ow, int64_t y0, int64_t y1, int64_t ox0, int64_t ox1) {
  for (int64_t ox = 0; ox < ox0; ++ox) {
    for (int64_t y = y0; y < y1; ++y) block[y * ow + ox] = Acc(0);
  }
  for (int64_t ox = ox1; ox < ow; ++ox) {
    for (int64_t y = y0; y < y1; ++y) block[y * ow + ox] = Acc(0);
  }
}

// im2col (below) for planes of at most kSmallPlane outputs: each channel is copied once into a
// zero-padded plane, from which every tap's rows are plain copies with no padding to work out.
// With calls to fill and copy each tap's 9 values, im2col was half of AirNet's bf16
// backward-weight on its 3x3 planes (7x7 planes, 49 values a tap, ran 10-15% slower this way).
constexpr int64_t kSmallPlane = 16, kSmallPadded = 1024;
bool im2col_small(const ConvGeom& g) {
  return g.oh * g.ow <= kSmallPlane && (g.h + 2 * g.ph) * (g.w + 2 * g.pw) <= kSmallPadded;
}

template <typename T, typename Acc>
void im2col_padded(const T* x, Acc* col, const ConvGeom& g, int64_t oy_begin, int64_t oy_end, int64_t ld) {
  const int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw, ow = g.ow;
  Acc padded[kSmallPadded];
  std::fill(padded, padded + hp * wp, Acc(0));  // the border stays zero; the inside is rewritten
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t iy = 0; iy < g.h; ++iy) convert_n(x + (c * g.h + iy) * g.w, padded + (iy + g.ph) * wp + g.pw, g.w);
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        Acc* row = col + ((c * g.kh + ky) * g.kw + kx) * ld;
        for (int64_t oy = oy_begin; oy < oy_end; ++oy) {
          const Acc* src = padded + (oy * g.sh + ky) * wp + kx;
          Acc* dst = row + (oy - oy_begin) * ow;
          if (g.sw == 1) {
            copy_short(src, ow, dst);
          } else {
            for (int64_t ox = 0; ox < ow; ++ox) dst[ox] = src[ox * g.sw];
          }
        }
      }
    }
  }
}

// Whole planes of 16-bit values, at most 64 in and out (AirNet's 7x7 and 3x3, SmallCNN's 8x8), go
// to the level's permute (isa::Im2col16) where it has one: per-tap copies of 49 or 9 values took
// as long as the AMX tile in bf16 backward-weight. Permuted, AirNet's 7x7 and 3x3 ones and
// SmallCNN's 8x8 one ran 25-40% faster (bench_kernels BM_ConvAir, BM_Conv; AMX Xeon).
bool im2col_permutes(const ConvGeom& g) {
  constexpr int64_t kMax = isa::Im2colPlan::kMaxValues;
  return isa::active().bf16.im2col16 && g.h * g.w <= kMax && g.oh * g.ow <= kMax;
}

// The plan of a geometry (isa.h): per tap, each output's input position and whether it has one.
// Made once per geometry and thread, not per call: a call often covers a panel of a few channels,
// fewer permutes than the plan has entries.
const isa::Im2colPlan& im2col_plan(const ConvGeom& g) {
  struct Cached {
    int64_t key[10] = {};
    std::vector<uint16_t> index;
    std::vector<uint64_t> keep;
    isa::Im2colPlan plan{};
  };
  thread_local Cached cached;
  const int64_t key[10] = {g.h, g.w, g.kh, g.kw, g.oh, g.ow, g.sh, g.sw, g.ph, g.pw};
  if (cached.plan.taps > 0 && std::equal(key, key + 10, cached.key)) return cached.plan;
  constexpr int64_t kMax = isa::Im2colPlan::kMaxValues;
  const int64_t taps = g.kh * g.kw;
  cached.index.assign(taps * kMax, 0);
  cached.keep.assign(taps, 0);
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t t = ky * g.kw + kx;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx, p = oy * g.ow + ox;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
          cached.index[t * kMax + p] = static_cast<uint16_t>(iy * g.w + ix);
          cached.keep[t] |= uint64_t{1} << p;
        }
      }
    }
  }
  std::copy(key, key + 10, cached.key);
  cached.plan = {taps, g.h * g.w, g.oh * g.ow, cached.index.data(), cached.keep.data()};
  return cached.plan;
}

// col[(c, ky, kx), (oy - oy_begin, ox)] = x[c, oy * sh - ph + ky, ox * sw - pw + kx] for output
// rows [oy_begin, oy_end), 0 in the padding. Each row of col holds (oy_end - oy_begin) * OW values
// and starts ld after the previous one (ld > that when several images share a column matrix).
template <typename T, typename Acc>
void im2col(const T* x, Acc* col, const ConvGeom& g, int64_t oy_begin, int64_t oy_end, int64_t ld) {
  if constexpr (sizeof(T) == 2 && std::is_same_v<T, Acc>) {
    if (oy_begin == 0 && oy_end == g.oh && im2col_permutes(g)) {
      return isa::active().bf16.im2col16(reinterpret_cast<const uint16_t*>(x), g.c, g.h * g.w, im2col_plan(g),
                                         reinterpret_cast<uint16_t*>(col), ld);
    }
  }
  if (im2col_small(g)) return im2col_padded(x, col, g, oy_begin, oy_end, ld);
  const int64_t len = (oy_end - oy_begin) * g.ow;
  // Stride 1 with OW == W: output (oy, ox) reads input (oy, ox) shifted by one constant offset, so
  // the valid rows copy as one block; the few columns that wrap around get zeroed afterwards.
  const bool block = g.sh == 1 && g.sw == 1 && g.ow == g.w;
  for (int64_t c = 0; c < g.c; ++c) {
    const T* xc = x + c * g.h * g.w;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      int64_t vy0, vy1;
      valid_range(g.h, g.oh, g.sh, g.ph, ky, vy0, vy1);
      vy0 = std::clamp(vy0, oy_begin, oy_end);
      vy1 = std::clamp(vy1, vy0, oy_end);
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        Acc* row = col + ((c * g.kh + ky) * g.kw + kx) * ld;
        int64_t ox0, ox1;
        valid_range(g.w, g.ow, g.sw, g.pw, kx, ox0, ox1);
        std::fill(row, row + (vy0 - oy_begin) * g.ow, Acc(0));
        std::fill(row + (vy1 - oy_begin) * g.ow, row + len, Acc(0));
        if (block && vy0 < vy1) {
          const int64_t shift = (ky - g.ph) * g.w + (kx - g.pw);
          const int64_t src_begin = vy0 * g.ow + shift, src_end = vy1 * g.ow + shift;
          const int64_t lo = std::max<int64_t>(src_begin, 0), hi = std::max(lo, std::min(src_end, g.h * g.w));
          Acc* base = row + (vy0 - oy_begin) * g.ow;  // base[s - src_begin] pairs with xc[s]
          std::fill(base, base + (lo - src_begin), Acc(0));
          std::fill(base + (hi - src_begin), base + (src_end - src_begin), Acc(0));
          convert_n(xc + lo, base + (lo - src_begin), hi - lo);
          zero_columns(row, g.ow, vy0 - oy_begin, vy1 - oy_begin, ox0, ox1);
          continue;
        }
        for (int64_t oy = vy0; oy < vy1; ++oy) {
          Acc* dst = row + (oy - oy_begin) * g.ow;
          std::fill(dst, dst + ox0, Acc(0));
          std::fill(dst + ox1, dst + g.ow, Acc(0));
          const T* src = xc + (oy * g.sh - g.ph + ky) * g.w + ox0 * g.sw - g.pw + kx;
          if (g.sw == 1) {
            convert_n(src, dst + ox0, ox1 - ox0);
          } else {
            for (int64_t ox = ox0; ox < ox1; ++ox) dst[ox] = static_cast<Acc>(src[(ox - ox0) * g.sw]);
          }
        }
      }
    }
  }
}

// The adjoint of im2col for output rows [oy_begin, oy_end): x[c, iy, ix] += col[(c, ky, kx),
// (oy - oy_begin, ox)], rows of col ld apart. x must be zeroed before the first chunk. The padding
// entries of col are zeroed on the way (col is scratch), which lets the stride-1 case add whole
// blocks.
template <typename Acc>
void col2im(Acc* col, Acc* x, const ConvGeom& g, int64_t oy_begin, int64_t oy_end, int64_t ld) {
  const bool block = g.sh == 1 && g.sw == 1 && g.ow == g.w;
  for (int64_t c = 0; c < g.c; ++c) {
    Acc* xc = x + c * g.h * g.w;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      int64_t vy0, vy1;
      valid_range(g.h, g.oh, g.sh, g.ph, ky, vy0, vy1);
      vy0 = std::clamp(vy0, oy_begin, oy_end);
      vy1 = std::clamp(vy1, vy0, oy_end);
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        Acc* row = col + ((c * g.kh + ky) * g.kw + kx) * ld;
        int64_t ox0, ox1;
        valid_range(g.w, g.ow, g.sw, g.pw, kx, ox0, ox1);
        if (block && vy0 < vy1) {
          zero_columns(row, g.ow, vy0 - oy_begin, vy1 - oy_begin, ox0, ox1);
          const int64_t shift = (ky - g.ph) * g.w + (kx - g.pw);
          const int64_t src_begin = vy0 * g.ow + shift, src_end = vy1 * g.ow + shift;
          const int64_t lo = std::max<int64_t>(src_begin, 0), hi = std::max(lo, std::min(src_end, g.h * g.w));
          const Acc* base = row + (vy0 - oy_begin) * g.ow;  // base[s - src_begin] adds into xc[s]
          Eigen::Map<Eigen::Array<Acc, Eigen::Dynamic, 1>>(xc + lo, hi - lo) +=
              Eigen::Map<const Eigen::Array<Acc, Eigen::Dynamic, 1>>(base + (lo - src_begin), hi - lo);
          continue;
        }
        for (int64_t oy = vy0; oy < vy1; ++oy) {
          const Acc* src = row + (oy - oy_begin) * g.ow;
          Acc* dst = xc + (oy * g.sh - g.ph + ky) * g.w + ox0 * g.sw - g.pw + kx;
          if (g.sw == 1) {
            for (int64_t ox = ox0; ox < ox1; ++ox) dst[ox - ox0] += src[ox];
          } else {
            for (int64_t ox = ox0; ox < ox1; ++ox) dst[(ox - ox0) * g.sw] += src[ox];
          }
        }
      }
    }
  }
}

// Output rows per chunk: as many as keep the chunk's column matrix within kChunkBytes.
template <typename Acc>
int64_t chunk_rows(const ConvGeom& g) {
  return std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(1, g.ckk() * g.ow * int64_t(sizeof(Acc))), 1, g.oh);
}

// The tensor's data as Acc: the data itself when T is Acc, else a widened copy in `slot`.
template <typename T, typename Acc>
const Acc* widen(const T* src, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, Acc>) {
    return src;
  } else {
    Acc* out = thread_scratch<Acc>(slot, n);
    convert_n(src, out, n);
    return out;
  }
}

// Where an Acc result of n elements goes: straight into dst when T is Acc, else into `slot`, to be
// rounded into dst afterwards.
template <typename T, typename Acc>
Acc* result_buffer(T* dst, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, Acc>) {
    return dst;
  } else {
    return thread_scratch<Acc>(slot, n);
  }
}

// The bias as Acc whatever its dtype, or nullptr when absent.
template <typename Acc>
const Acc* bias_as(const TensorRef& bias, int64_t o) {
  if (!bias.defined()) return nullptr;
  const Acc* out = nullptr;
  dispatch_floating(bias.dtype, "conv2d", [&](auto tag) { out = widen<decltype(tag), Acc>(bias.as<decltype(tag)>(), o, kSlotBias); });
  return out;
}

template <typename T>
using StridedMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

// The packed path's walk (conv2d_walk.h): GEMMs of at least kMinCols columns. (AirNet's 7x7 planes,
// cut into 4-row chunks by kChunkBytes, ran as 28-column GEMMs, and backward-weight loaded and
// stored its 2304 x 256 accumulator for every 28 positions.)
Walk packed_walk(const ConvGeom& g) {
  constexpr int64_t kMinCols = 384;
  if (g.plane() >= kMinCols) {
    return {1, std::clamp(std::max(chunk_rows<float>(g), ceil_div(kMinCols, g.ow)), int64_t(1), g.oh)};
  }
  return {balanced_group(g.n, ceil_div(kMinCols, g.plane()), available_threads()), g.oh};
}

// Whether a convolution runs as Winograd F(2x2, 3x3): 3x3, stride 1, padding 1 (SmallCNN's and
// AirNet's), enough channels for the 16 GEMMs to dominate the transforms, and planes large enough
// that whole 2x2 tiles do not waste the saving: a 3x3 plane computes 16 outputs for 9, 0.79x the
// direct multiplies (7x7 is 0.58x, 32x32 0.44x), and still ran AirNet's 256 -> 256 @ 3x3 20-30%
// faster than im2col in all three passes (AMX Xeon, avx512 and avx2 levels); 1x1 or 1xN planes
// (2x or more the multiplies) do not. DEMI_WINOGRAD=0 turns it off, for benchmarks.
bool use_winograd(const ConvGeom& g) {
  static const bool enabled = [] {
    const char* env = std::getenv("DEMI_WINOGRAD");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  if (!enabled || g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.ph != 1 || g.pw != 1) return false;
  if (g.c < 16 || g.o < 16) return false;
  const int64_t tiles = ceil_div(g.oh, 2) * ceil_div(g.ow, 2);
  return 16 * tiles <= 8 * g.plane();  // <= 0.89x the direct convolution's multiplies
}

// How the Winograd paths walk a batch: tiles of h x w planes, images in groups of at least
// `min_cols` tiles (the GEMMs' columns) and a whole number of groups per thread.
// Within a group, planes with at most half a vector of tiles a row go through the transforms
// `lane_images` at a time, side by side in the vector lanes (winograd.h, "Lane groups"): with 16
// lanes (AVX-512) 4 for 7x7 and 2 for 15x15, with 8 (AVX2) 2 for 7x7.
struct WinogradWalk {
  int64_t h, w, th, tw, tiles, per_group, lane_images;
  // The distance between two channels' rows of V, M or Z: a group's columns, in an odd number of
  // whole lines, so that the GEMMs read them in place (packed_gemm.cpp's gemm_strips).
  int64_t row;
  WinogradWalk(int64_t n, int64_t h_, int64_t w_, int threads, int64_t lanes, int64_t min_cols)
      : h(h_), w(w_), th(ceil_div(h_, 2)), tw(ceil_div(w_, 2)), tiles(th * tw),
        lane_images(tw <= lanes / 2 ? lanes / tw : 1) {
    per_group = balanced_group(n, ceil_div(min_cols, tiles), threads);
    row = odd_lines(per_group * tiles);
  }
  // The distance between two points of V, M or Z of `channels` rows.
  int64_t point(int64_t channels) const { return odd_lines(channels * row); }
};
// A group's V and M (or Z) are 16 points x channels x columns, written by one transform and read
// by the next step: 6 MiB each for AirNet's 256-channel layers at 384 columns, far past a 2 MiB L2,
// while the GEMMs reuse each column for every output channel whatever the group. 128 columns ran
// AirNet's and SmallCNN's forward and backward-data passes 10-20% faster than 384 (64 was no
// better, and slower on 15x15 planes). Backward-weight's dot tile sums along the columns, so there
// a longer sum pays for its fold, up to where V and Z leave L2. With 8 lanes (avx2) 512 columns ran
// SmallCNN's 32- and 64-channel layers and AirNet's 64-channel ones 3-8% faster than 256 on the
// AVX2 EPYC (and within 5% either way on the AMX Xeon at avx2). With 16 lanes, where the tile does
// twice the work per instruction, V and Z's trips through L2 weigh more: on the AMX Xeon 256 ran
// four of those five layers 9-17% faster than 512 (2 MiB of V and Z at 32 channels; the fifth the
// same), and within 3% of 128 or 4-12% faster. Since the dot tile's blocks run inlined (a shorter
// sum costs less), 128 runs the 64 -> 64 layers (2 MiB of V and Z at 256) 5-7% faster, and 256 stays
// where they fit 1.5 MiB (AirNet's 24 -> 64: 1.4 MiB, 3% slower at 128). All measured with a 2 MiB
// L2; DEMI_WINOGRAD_DOT_COLS=<columns> forces one width, to measure a CPU with another L2 (Zen 4: 1 MiB).
constexpr int64_t kWinogradCols = 128;
constexpr int64_t kDotColsBytes = int64_t{3} << 19;  // 1.5 MiB
int64_t winograd_dot_cols(int64_t lanes, int64_t ins, int64_t outs) {
  static const int64_t forced = [] {
    const char* env = std::getenv("DEMI_WINOGRAD_DOT_COLS");
    if (!env || !*env) return int64_t{0};
    char* end = nullptr;
    const long cols = std::strtol(env, &end, 10);
    DEMI_CHECK(*end == '\0' && cols >= 1 && cols <= 65536, "DEMI_WINOGRAD_DOT_COLS=", env,
               ": expected a number of columns from 1 to 65536 (backward-weight's Winograd tiles a group, at least)");
    return int64_t{cols};
  }();
  if (forced) return forced;
  if (lanes < 16) return 512;
  const int64_t bytes = winograd::kPoints * (ins + outs) * 256 * static_cast<int64_t>(sizeof(float));
  return bytes > kDotColsBytes ? 128 : 256;
}

// The float view of plane p (plane_size values of T): p itself for fp32, else widened into wide.
template <typename T>
const float* as_float(const T* p, int64_t plane_size, float* wide) {
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    convert_n(p, wide, plane_size);
    return wide;
  }
}

// V = B^T d B for every tile of images [i0, i0 + ni) of `input` (ins channels): point xi of the
// group's tiles at v[xi * wk.point(ins) + c * wk.row + column], column < ni * tiles, columns in
// lane groups (winograd.h). Uses the calling thread's kSlotGradY (and kSlotWide for half inputs).
template <typename T>
void winograd_input(const T* input, int64_t i0, int64_t ni, int64_t ins, const WinogradWalk& wk, float* v) {
  const isa::Winograd& wg = isa::active().winograd;
  const int64_t plane = wk.h * wk.w, n_split = wk.tw + 1, split_rows = 2 * wk.th + 2, ld = wk.point(ins);
  const int64_t view = split_rows * wk.lane_images * wk.tw;  // one of a lane group's four views
  float* e = thread_scratch<float>(kSlotGradY, 2 * split_rows * n_split + 4 * view);
  float* o = e + split_rows * n_split;
  float* views = o + split_rows * n_split;
  float* wide = std::is_same_v<T, float> ? nullptr : thread_scratch<float>(kSlotWide, wk.lane_images * plane);
  for (int64_t k0 = 0; k0 < ni; k0 += wk.lane_images) {
    const int64_t images = std::min(wk.lane_images, ni - k0), lanes = images * wk.tw;
    for (int64_t c = 0; c < ins; ++c) {
      auto x = [&](int64_t g) {  // image k0 + g's channel c, as floats (half ones widened into wide's slot g)
        return as_float(input + ((i0 + k0 + g) * ins + c) * plane, plane, wide ? wide + g * plane : nullptr);
      };
      float* vc = v + c * wk.row + k0 * wk.tiles;
      if (images == 1) {
        wg.split_columns(x(0), wk.h, wk.w, n_split, split_rows, e, o);
        wg.transform_input({e, e + 1, o, o + 1, n_split, wk.tw}, wk.th, vc, ld);
        continue;
      }
      float *e0 = views, *e1 = views + view, *o0 = views + 2 * view, *o1 = views + 3 * view;
      const float* planes[16];
      for (int64_t g = 0; g < images; ++g) planes[g] = x(g);
      wg.split_lanes(planes, images, wk.h, wk.w, wk.tw, split_rows, e0, e1, o0, o1);
      wg.transform_input({e0, e1, o0, o1, lanes, lanes}, wk.th, vc, ld);
    }
  }
}

// A 3x3 / stride 1 / padding 1 convolution of n images (ins channels, h x w) into outs channels by
// Winograd F(2x2, 3x3), with the transformed weights u_packed (kPoints panels of
// packed_size(outs, ins)): per group of images, the input transform, 16 GEMMs over all the group's
// tiles, the output transform (backward-data is the same convolution with the adjoint weights).
template <typename T>
void winograd_conv(const T* input, int64_t n, int64_t ins, int64_t h, int64_t w, const float* u_packed,
                   int64_t outs, const float* bias, T* output) {
  using winograd::kPoints;
  const isa::Winograd& wg = isa::active().winograd;
  const WinogradWalk wk(n, h, w, available_threads(), wg.lanes, kWinogradCols);
  const int64_t tiles = wk.tiles, plane = h * w, panel = packed_gemm::packed_size(outs, ins);
  for_each_group(n, Walk{wk.per_group, 0}, 0, [&](int64_t i0, int64_t ni) {
    const int64_t cols = ni * tiles;  // the GEMMs' columns
    const int64_t row = wk.row, v_point = wk.point(ins), m_point = wk.point(outs);
    float* v = thread_scratch<float>(kSlotCol, kPoints * v_point);
    float* m = thread_scratch<float>(kSlotImage, kPoints * m_point);
    float* wide = std::is_same_v<T, float> ? nullptr : thread_scratch<float>(kSlotPackedCol, wk.lane_images * plane);
    winograd_input(input, i0, ni, ins, wk, v);
    for (int64_t xi = 0; xi < kPoints; ++xi) {
      packed_gemm::gemm(u_packed + xi * panel, outs, ins, v + xi * v_point, row, cols, m + xi * m_point, row, nullptr);
    }
    for (int64_t k0 = 0; k0 < ni; k0 += wk.lane_images) {
      const int64_t images = std::min(wk.lane_images, ni - k0);
      for (int64_t o = 0; o < outs; ++o) {
        float* planes[16];
        for (int64_t g = 0; g < images; ++g) {
          T* y = output + ((i0 + k0 + g) * outs + o) * plane;
          planes[g] = std::is_same_v<T, float> ? reinterpret_cast<float*>(y) : wide + g * plane;
        }
        wg.transform_output(m + o * row + k0 * tiles, m_point, h, w, wk.th, wk.tw, images,
                                   bias ? bias[o] : 0.0f, planes);
        if constexpr (!std::is_same_v<T, float>) {
          for (int64_t g = 0; g < images; ++g) convert_n(wide + g * plane, output + ((i0 + k0 + g) * outs + o) * plane, plane);
        }
      }
    }
  });
}

// The transformed, packed weights of the convolution (adjoint: of its backward-data), in the
// calling thread's kSlotPacked.
const float* winograd_weights(const float* w, int64_t outs, int64_t ins, bool adjoint) {
  return winograd::packed_weights(winograd::kPoints, outs, ins, [&](float* u, int64_t begin, int64_t end) {
    winograd::transform_weights(w, outs, ins, adjoint, u, begin, end);
  });
}

template <typename T>
void forward_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w;
  if (use_winograd(g)) {
    if constexpr (!std::is_same_v<T, float>) {  // bf16 results: F(4x4) where its error fits
      if (conv2d_winograd4::takes(a.output.dtype, g.c, g.o)) {
        return conv2d_winograd4::conv(a.input.as<T>(), g.n, g.c, g.h, g.w, w, g.o, false, bias, a.output.as<T>());
      }
    }
    return winograd_conv(a.input.as<T>(), g.n, g.c, g.h, g.w, winograd_weights(w, g.o, g.c, false), g.o, bias,
                         a.output.as<T>());
  }
  const Walk wk = packed_walk(g);
  float* packed = thread_scratch<float>(kSlotPacked, packed_gemm::packed_size(g.o, ckk));
  packed_gemm::pack_a(w, ckk, 1, g.o, ckk, packed);
  const T* input = a.input.as<T>();
  T* output = a.output.as<T>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    if (ni == 1) {
      const T* x = input + i0 * image;
      float* y = result_buffer<T, float>(output + i0 * g.o * plane, g.o * plane, kSlotImage);
      if (std::is_same_v<T, float> && g.pointwise()) {  // the image is its own column matrix
        packed_gemm::gemm(packed, g.o, ckk, reinterpret_cast<const float*>(x), plane, plane, y, plane, bias);
      } else {
        float* col = thread_scratch<float>(kSlotCol, ckk * wk.rows * g.ow);
        for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
          const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
          im2col(x, col, g, oy, end, len);
          packed_gemm::gemm(packed, g.o, ckk, col, len, len, y + oy * g.ow, plane, bias);
        }
      }
      if constexpr (!std::is_same_v<T, float>) convert_n(y, output + i0 * g.o * plane, g.o * plane);
      return;
    }
    // Small images side by side: one GEMM, then each image's block copied out.
    const int64_t cols = ni * plane;
    float* col = thread_scratch<float>(kSlotCol, ckk * cols);
    for (int64_t k = 0; k < ni; ++k) im2col(input + (i0 + k) * image, col + k * plane, g, 0, g.oh, cols);
    float* y = thread_scratch<float>(kSlotImage, g.o * cols);
    packed_gemm::gemm(packed, g.o, ckk, col, cols, cols, y, cols, bias);
    for (int64_t k = 0; k < ni; ++k) {
      for (int64_t o = 0; o < g.o; ++o) convert_n(y + o * cols + k * plane, output + ((i0 + k) * g.o + o) * plane, plane);
    }
  });
}

// grad_col = W^T grad_y, then col2im: A is W^T (ckk x o).
template <typename T>
void backward_data_packed(const Conv2dArgs& a, const ConvGeom& g, const float* w) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w;
  if (use_winograd(g)) {  // grad_x = grad_y convolved with the flipped, transposed weights
    if constexpr (!std::is_same_v<T, float>) {
      if (conv2d_winograd4::takes(a.input.dtype, g.o, g.c)) {
        return conv2d_winograd4::conv(a.output.as<T>(), g.n, g.o, g.oh, g.ow, w, g.c, true, nullptr, a.input.as<T>());
      }
    }
    return winograd_conv(a.output.as<T>(), g.n, g.o, g.oh, g.ow, winograd_weights(w, g.c, g.o, true), g.c, nullptr,
                         a.input.as<T>());
  }
  const Walk wk = packed_walk(g);
  float* packed = thread_scratch<float>(kSlotPacked, packed_gemm::packed_size(ckk, g.o));
  packed_gemm::pack_a(w, 1, ckk, ckk, g.o, packed);
  const T* grad_y = a.output.as<T>();
  T* grad_x = a.input.as<T>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    if (ni == 1) {
      const float* gy = widen<T, float>(grad_y + i0 * g.o * plane, g.o * plane, kSlotGradY);
      float* gx = result_buffer<T, float>(grad_x + i0 * image, image, kSlotImage);
      if (g.pointwise()) {
        packed_gemm::gemm(packed, g.c, g.o, gy, plane, plane, gx, plane, nullptr);
      } else {
        float* gcol = thread_scratch<float>(kSlotCol, ckk * wk.rows * g.ow);
        std::fill(gx, gx + image, 0.0f);
        for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
          const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
          packed_gemm::gemm(packed, ckk, g.o, gy + oy * g.ow, plane, len, gcol, len, nullptr);
          col2im(gcol, gx, g, oy, end, len);
        }
      }
      if constexpr (!std::is_same_v<T, float>) convert_n(gx, grad_x + i0 * image, image);
      return;
    }
    // Small images side by side: grad_y gathered into one matrix, one GEMM, col2im per image.
    const int64_t cols = ni * plane;
    float* gy = thread_scratch<float>(kSlotGradY, g.o * cols);
    for (int64_t k = 0; k < ni; ++k) {
      for (int64_t o = 0; o < g.o; ++o) convert_n(grad_y + ((i0 + k) * g.o + o) * plane, gy + o * cols + k * plane, plane);
    }
    float* gcol = thread_scratch<float>(kSlotCol, ckk * cols);
    packed_gemm::gemm(packed, ckk, g.o, gy, cols, cols, gcol, cols, nullptr);
    for (int64_t k = 0; k < ni; ++k) {
      float* gx = result_buffer<T, float>(grad_x + (i0 + k) * image, image, kSlotImage);
      std::fill(gx, gx + image, 0.0f);
      col2im(gcol + k * plane, gx, g, 0, g.oh, cols);
      if constexpr (!std::is_same_v<T, float>) convert_n(gx, grad_x + (i0 + k) * image, image);
    }
  });
}

// Backward-weight's products C (m x n) += A (m x depth) B^T (B: n x depth), both operands with the
// depth contiguous (Winograd's V and Z, im2col's columns and grad_y's rows). Small ones (SmallCNN's
// 32..64 channels, 27 x 32 for its first layer) go to the dot tile, which reads both in place;
// large ones (AirNet's 256 channels) to the packed tile, whose 8 x 48 block reuses each load far
// more, which outweighs packing A and transposing B there. The crossover, m n = 40 (m + n), is
// where the two met on an AMX Xeon (docs/BENCHMARKS.md): as dots, 27 x 32 ran 40% faster, 32 x 32
// 20%, 64 x 64 0-10% (the same at avx2), 64 x 128 the same, 64 x 256 and 256 x 256 5-20% slower.
bool grad_weight_as_dots(int64_t m, int64_t n) { return m * n < 40 * (m + n); }
void grad_weight_product(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t n, int64_t depth,
                         float* c, packed_gemm::Accumulate accumulate = packed_gemm::Accumulate::Yes) {
  if (grad_weight_as_dots(m, n)) {
    packed_gemm::gemm_nt(a, lda, m, b, ldb, n, depth, c, n, accumulate);
    return;
  }
  float* packed = thread_scratch<float>(kSlotPackedCol, packed_gemm::packed_size(m, depth));
  packed_gemm::pack_a(a, lda, 1, m, depth, packed);
  packed_gemm::gemm_bt(packed, m, depth, b, ldb, n, c, n, accumulate);
}

// grad_w[o][c] (3x3, [o][c][r][s] as the weight) = G^T dU[o][c] G (winograd.h), dU^T[xi][c][o]
// being the sum of du's per-thread copies that `ran`, in thread order, so that the result does not
// depend on timing. Input channel by input channel, so that du is read as 16 sequential streams
// (one per point) while grad_w's rows, 9 values of each per channel, fill in L1; in blocks of 16
// output channels, whose transforms run side by side. (The threads' sums, the transform into
// grad_w^T and the transpose into grad_w were three passes and a zero fill, 10% of AirNet's
// 256 -> 256 @ 7 backward-weight.)
template <typename T>
void weight_gradients(const float* du, const std::vector<char>& ran, int64_t ins, int64_t outs, T* grad_w) {
  using winograd::kPoints;
  constexpr int64_t kBlock = 16;
  const int64_t usize = kPoints * ins * outs;
  parallel_for(ins, outs * kPoints * static_cast<int64_t>(ran.size() + 1), [&](int64_t begin, int64_t end) {
    alignas(64) float d[kPoints][kBlock], w[9][kBlock], run[9];
    for (int64_t c = begin; c < end; ++c) {
      for (int64_t o0 = 0; o0 < outs; o0 += kBlock) {
        const int64_t n = std::min(kBlock, outs - o0);
        for (int64_t xi = 0; xi < kPoints; ++xi) {
          std::fill(d[xi], d[xi] + kBlock, 0.0f);
          for (size_t t = 0; t < ran.size(); ++t) {
            if (!ran[t]) continue;
            const float* src = du + t * usize + (xi * ins + c) * outs + o0;
            for (int64_t j = 0; j < n; ++j) d[xi][j] += src[j];
          }
        }
        winograd::weight_gradients(d, w);
        for (int64_t j = 0; j < n; ++j) {
          T* dst = grad_w + ((o0 + j) * ins + c) * 9;
          if constexpr (std::is_same_v<T, float>) {
            for (int k = 0; k < 9; ++k) dst[k] = w[k][j];
          } else {
            for (int k = 0; k < 9; ++k) run[k] = w[k][j];
            convert_n(run, dst, 9);
          }
        }
      }
    }
  });
}

// backward-weight by Winograd F(2x2, 3x3): per group of images, V (the forward's input transform)
// and Z = A dY A^T of grad_y's tiles; dU^T[xi] (ins x outs) += V[xi] Z[xi]^T, summed over the
// tiles, per thread; at the end dW = G^T dU G, written straight into grad_w (weight_gradients).
// Bias sums go to bias_partial.
template <typename T>
void backward_weight_winograd(const Conv2dArgs& a, const ConvGeom& g, double* bias_partial, int threads) {
  using winograd::kPoints;
  const isa::Winograd& wg = isa::active().winograd;
  const int64_t walk_cols = grad_weight_as_dots(g.c, g.o) ? winograd_dot_cols(wg.lanes, g.c, g.o) : kWinogradCols;
  const WinogradWalk wk(g.n, g.h, g.w, threads, wg.lanes, walk_cols);
  const int64_t ins = g.c, outs = g.o, plane = g.h * g.w, th = wk.th, tw = wk.tw, tiles = wk.tiles;
  const int64_t usize = kPoints * ins * outs;
  // dU^T[xi][in][out] per thread, assigned by the thread's first group (no fill: 8 MiB for AirNet's
  // 256 -> 256) and added to by the rest; a thread that ran no group has none.
  float* du = thread_scratch<float>(kSlotWinograd, threads * usize);
  std::vector<char> ran(threads, 0);
  const T* input = a.input.as<T>();
  const T* grad_y = a.output.as<T>();
  const bool want_bias = a.bias.defined();
  for_each_group(g.n, Walk{wk.per_group, 0}, threads, [&](int64_t i0, int64_t ni) {
    const int t = threads > 1 ? omp_get_thread_num() : 0;
    const int64_t cols = ni * tiles, row = wk.row, v_point = wk.point(ins), z_point = wk.point(outs);
    float* v = thread_scratch<float>(kSlotCol, kPoints * v_point);
    float* z = thread_scratch<float>(kSlotImage, kPoints * z_point);
    winograd_input(input, i0, ni, ins, wk, v);
    const int64_t max_lanes = wk.lane_images * tw;
    float* split_e = thread_scratch<float>(kSlotGradY, 4 * th * max_lanes);  // then split_o
    float* wide = std::is_same_v<T, float> ? nullptr : thread_scratch<float>(kSlotWide, wk.lane_images * plane);
    for (int64_t k0 = 0; k0 < ni; k0 += wk.lane_images) {
      const int64_t images = std::min(wk.lane_images, ni - k0), lanes = images * tw;
      float* split_o = split_e + 2 * th * lanes;
      for (int64_t o = 0; o < outs; ++o) {
        const float* planes[16];  // channel o of the group's images, as floats
        for (int64_t k = 0; k < images; ++k) {
          planes[k] = as_float(grad_y + ((i0 + k0 + k) * outs + o) * plane, plane, wide ? wide + k * plane : nullptr);
        }
        if (images == 1) {  // the plane summed first: the sum's stream brings it into L1 for the split
          if (want_bias) bias_partial[t * outs + o] += sum_double(planes[0], plane);
          std::fill(split_e, split_e + 4 * th * lanes, 0.0f);
          wg.split_grad_output(planes[0], g.h, g.w, lanes, 0, split_e, split_o);
        } else {  // e and o hold every value of the small planes, and zeros: one sum
          wg.split_grad_lanes(planes, images, g.h, g.w, tw, 2 * th, split_e, split_o);
          if (want_bias) bias_partial[t * outs + o] += sum_double(split_e, 4 * th * lanes);
        }
        wg.transform_grad_output(split_e, split_o, th, lanes, z + o * row + k0 * tiles, z_point);
      }
    }
    const auto accumulate = ran[t] ? packed_gemm::Accumulate::Yes : packed_gemm::Accumulate::No;
    for (int64_t xi = 0; xi < kPoints; ++xi) {
      grad_weight_product(v + xi * v_point, row, ins, z + xi * z_point, row, outs, cols, du + t * usize + xi * ins * outs,
                          accumulate);
    }
    ran[t] = 1;
  });
  weight_gradients(du, ran, ins, outs, a.weight.as<T>());
}

// grad_w^T (ckk x o) += col (ckk x depth) * grad_y^T (depth x o) into the calling thread's partial;
// the depth is a chunk of rows of one image or a group of small images (their grad_y rows gathered
// side by side first).
template <typename T>
void backward_weight_packed(const Conv2dArgs& a, const ConvGeom& g, float* partial, double* bias_partial,
                            int threads) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, wsize = g.o * ckk;
  const Walk wk = packed_walk(g);
  const T* input = a.input.as<T>();
  const T* grad_y = a.output.as<T>();
  const bool want_bias = a.bias.defined();
  for_each_group(g.n, wk, threads, [&](int64_t i0, int64_t ni) {
    const int t = threads > 1 ? omp_get_thread_num() : 0;
    const int64_t max_cols = std::max(ni * plane, wk.rows * g.ow);
    float* col = thread_scratch<float>(kSlotCol, ckk * max_cols);
    float* gy_group = ni > 1 ? thread_scratch<float>(kSlotImage, g.o * ni * plane) : nullptr;
    for (int64_t k = 0; k < ni; ++k) {
      const T* x = input + (i0 + k) * image;
      const float* gy = widen<T, float>(grad_y + (i0 + k) * g.o * plane, g.o * plane, kSlotGradY);
      if (want_bias) {
        for (int64_t o = 0; o < g.o; ++o) {
          bias_partial[t * g.o + o] += static_cast<double>(ConstMatrixMap<float>(gy, g.o, plane).row(o).sum());
        }
      }
      if (ni > 1) {  // gather the group, one product after the last image
        im2col(x, col + k * plane, g, 0, g.oh, ni * plane);
        for (int64_t o = 0; o < g.o; ++o) copy_short(gy + o * plane, plane, gy_group + (o * ni + k) * plane);
        if (k == ni - 1) grad_weight_product(col, ni * plane, ckk, gy_group, ni * plane, g.o, ni * plane, partial + t * wsize);
        continue;
      }
      for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
        const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
        if (std::is_same_v<T, float> && g.pointwise()) {  // rows of the image are the columns
          grad_weight_product(reinterpret_cast<const float*>(x) + oy * g.ow, plane, ckk, gy + oy * g.ow, plane, g.o, len,
                              partial + t * wsize);
        } else {
          im2col(x, col, g, oy, end, len);
          grad_weight_product(col, len, ckk, gy + oy * g.ow, plane, g.o, len, partial + t * wsize);
        }
      }
    }
  });
}

// bf16 convolutions on the ISA level's bf16 tile (AMX, AVX512_BF16, or the scalar oracle): the
// operands stay bf16 (each product exact in fp32), sums are fp32 and the output is rounded once.
// im2col writes bf16 columns, half the bytes of fp32 ones, and packing them into pairs of k rows
// (packed_gemm.h) is one more pass over them. Which convolutions take this path is the level's
// isa::Bf16Route (3x3 ones only where the tile beats fp32 Winograd: AMX, and Zen 4's vdpbf16ps).
using BF16 = Eigen::bfloat16;
namespace bf = packed_gemm_bf16;

bool use_bf16_tile(const ConvGeom& g) {
  const isa::Bf16Route route = isa::active().bf16_route;
  return route == isa::Bf16Route::Everything || (route == isa::Bf16Route::NonWinograd && !use_winograd(g));
}
const uint16_t* bits(const BF16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* bits(BF16* p) { return reinterpret_cast<uint16_t*>(p); }

// B of a GEMM of `cols` columns in pairs of k rows, in the calling thread's kSlotPackedCol;
// fill(out) packs the columns, then the padding is zeroed.
template <typename Fill>
const uint16_t* pairs_of(int64_t k, int64_t cols, Fill&& fill) {
  uint16_t* out = thread_scratch<uint16_t>(kSlotPackedCol, bf::b_size(k, cols));
  fill(out);
  bf::pad_b(out, k, cols);
  return out;
}

// y = W col + bias: A is the weight (o x ckk), B the image's columns.
void forward_bf16(const Conv2dArgs& a, const ConvGeom& g, const float* bias) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, kp = bf::k_padded(ckk);
  uint16_t* w = thread_scratch<uint16_t>(kSlotPacked, bf::m_padded(g.o) * kp);
  bf::pack_a(bits(a.weight.as<BF16>()), ckk, 1, g.o, ckk, w);
  const Walk wk = packed_walk(g);
  const BF16* input = a.input.as<BF16>();
  BF16* output = a.output.as<BF16>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    const int64_t cols = ni > 1 ? ni * plane : wk.rows * g.ow;  // the widest GEMM of this group
    BF16* col = thread_scratch<BF16>(kSlotCol, ckk * cols);
    float* y = thread_scratch<float>(kSlotImage, g.o * std::max(cols, plane));
    if (ni == 1) {
      const BF16* x = input + i0 * image;
      for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
        const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
        const BF16* b = x + oy * g.ow;  // pointwise: the image is its own column matrix
        int64_t ld = plane;
        if (!g.pointwise()) {
          im2col(x, col, g, oy, end, len);
          b = col, ld = len;
        }
        const uint16_t* pairs = pairs_of(ckk, len, [&](uint16_t* out) { bf::pack_b(bits(b), ld, ckk, len, out, 0); });
        bf::gemm(w, kp, g.o, ckk, pairs, len, y + oy * g.ow, plane, bias);
      }
      convert_n(y, output + i0 * g.o * plane, g.o * plane);
      return;
    }
    for (int64_t k = 0; k < ni; ++k) im2col(input + (i0 + k) * image, col + k * plane, g, 0, g.oh, cols);
    const uint16_t* pairs = pairs_of(ckk, cols, [&](uint16_t* out) { bf::pack_b(bits(col), cols, ckk, cols, out, 0); });
    bf::gemm(w, kp, g.o, ckk, pairs, cols, y, cols, bias);
    for (int64_t k = 0; k < ni; ++k) {
      for (int64_t o = 0; o < g.o; ++o) convert_n(y + o * cols + k * plane, output + ((i0 + k) * g.o + o) * plane, plane);
    }
  });
}

// grad_col = W^T grad_y, then col2im (fp32): A is W^T (ckk x o), B grad_y's rows.
void backward_data_bf16(const Conv2dArgs& a, const ConvGeom& g) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, kp = bf::k_padded(g.o);
  uint16_t* w = thread_scratch<uint16_t>(kSlotPacked, bf::m_padded(ckk) * kp);
  bf::pack_a(bits(a.weight.as<BF16>()), 1, ckk, ckk, g.o, w);
  const Walk wk = packed_walk(g);
  const BF16* grad_y = a.output.as<BF16>();
  BF16* grad_x = a.input.as<BF16>();
  for_each_group(g.n, wk, 0, [&](int64_t i0, int64_t ni) {
    const int64_t cols = ni > 1 ? ni * plane : g.pointwise() ? plane : wk.rows * g.ow;
    float* gcol = thread_scratch<float>(kSlotCol, ckk * cols);
    float* gx = thread_scratch<float>(kSlotImage, image);
    if (ni == 1) {
      const BF16* gy = grad_y + i0 * g.o * plane;
      if (g.pointwise()) {
        const uint16_t* pairs = pairs_of(g.o, plane, [&](uint16_t* out) { bf::pack_b(bits(gy), plane, g.o, plane, out, 0); });
        bf::gemm(w, kp, ckk, g.o, pairs, plane, gx, plane, nullptr);
      } else {
        std::fill(gx, gx + image, 0.0f);
        for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
          const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow;
          const uint16_t* pairs = pairs_of(g.o, len, [&](uint16_t* out) { bf::pack_b(bits(gy + oy * g.ow), plane, g.o, len, out, 0); });
          bf::gemm(w, kp, ckk, g.o, pairs, len, gcol, len, nullptr);
          col2im(gcol, gx, g, oy, end, len);
        }
      }
      convert_n(gx, grad_x + i0 * image, image);
      return;
    }
    const uint16_t* pairs = pairs_of(g.o, cols, [&](uint16_t* out) {
      for (int64_t k = 0; k < ni; ++k) bf::pack_b(bits(grad_y + (i0 + k) * g.o * plane), plane, g.o, plane, out, k * plane);
    });
    bf::gemm(w, kp, ckk, g.o, pairs, cols, gcol, cols, nullptr);
    for (int64_t k = 0; k < ni; ++k) {
      std::fill(gx, gx + image, 0.0f);
      col2im(gcol + k * plane, gx, g, 0, g.oh, cols);
      convert_n(gx, grad_x + (i0 + k) * image, image);
    }
  });
}

// grad_w^T (ckk x o) += col (ckk x depth) grad_y^T (depth x o) into the calling thread's partial:
// im2col writes A in place (rows of k_padded(depth)), grad_y is gathered into rows of an even
// length so that its pairs are 32-bit words to transpose.
void backward_weight_bf16(const Conv2dArgs& a, const ConvGeom& g, float* partial, double* bias_partial, int threads) {
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, wsize = g.o * ckk;
  const Walk wk = packed_walk(g);
  const BF16* input = a.input.as<BF16>();
  const BF16* grad_y = a.output.as<BF16>();
  const bool want_bias = a.bias.defined();
  for_each_group(g.n, wk, threads, [&](int64_t i0, int64_t ni) {
    const int t = threads > 1 ? omp_get_thread_num() : 0;
    const int64_t max_depth = std::max(ni * plane, wk.rows * g.ow), max_lda = bf::k_padded(max_depth);
    BF16* col = thread_scratch<BF16>(kSlotCol, bf::m_padded(ckk) * max_lda);
    BF16* gy = thread_scratch<BF16>(kSlotGradYT, g.o * (max_depth + 1));
    // col (lda apart) and gy (gy_ld apart) hold depth columns: accumulate.
    auto accumulate = [&](int64_t depth, int64_t lda, int64_t gy_ld) {
      bf::pad_a(bits(col), lda, ckk, depth);
      const uint16_t* pairs = pairs_of(depth, g.o, [&](uint16_t* out) { bf::pack_bt(bits(gy), gy_ld, depth, g.o, out, 0); });
      bf::gemm(bits(col), lda, ckk, depth, pairs, g.o, partial + t * wsize, g.o, nullptr, bf::Accumulate::Yes);
    };
    if (ni > 1) {  // the group side by side, one GEMM
      const int64_t depth = ni * plane, lda = bf::k_padded(depth), gy_ld = depth + depth % 2;
      for (int64_t k = 0; k < ni; ++k) {
        im2col(input + (i0 + k) * image, col + k * plane, g, 0, g.oh, lda);
        for (int64_t o = 0; o < g.o; ++o) {
          copy_short(grad_y + ((i0 + k) * g.o + o) * plane, plane, gy + o * gy_ld + k * plane);
        }
      }
      if (want_bias) {  // the group's gathered rows, one sum each rather than one a plane
        for (int64_t o = 0; o < g.o; ++o) bias_partial[t * g.o + o] += sum_double(gy + o * gy_ld, depth);
      }
      accumulate(depth, lda, gy_ld);
      return;
    }
    if (want_bias) {
      for (int64_t o = 0; o < g.o; ++o) bias_partial[t * g.o + o] += sum_double(grad_y + (i0 * g.o + o) * plane, plane);
    }
    const BF16* x = input + i0 * image;
    for (int64_t oy = 0; oy < g.oh; oy += wk.rows) {
      const int64_t end = std::min(g.oh, oy + wk.rows), len = (end - oy) * g.ow, lda = bf::k_padded(len);
      const int64_t gy_ld = len + len % 2;
      im2col(x, col, g, oy, end, lda);
      for (int64_t o = 0; o < g.o; ++o) copy_short(grad_y + (i0 * g.o + o) * plane + oy * g.ow, len, gy + o * gy_ld);
      accumulate(len, lda, gy_ld);
    }
  });
}

// The bytes of backward-weight's B (grad_y^T of a chunk of images, in pairs) that each core keeps
// in its L2 while it walks its panels of grad_w^T's rows.
constexpr int64_t kWeightGradBBytes = 512 << 10;
// The most rows of grad_w^T (channels x taps) in a panel: its im2col (rows x depth) stays in L2.
constexpr int64_t kWeightGradPanelRows = 128;

// Whether bf16 backward-weight splits grad_w between the threads (backward_weight_bf16_split)
// rather than the images (backward_weight_bf16): when a thread's own fp32 partial grad_w would not
// fit L2 (1 MiB on Zen 4), which the tile re-reads at every group of images. Measured on AMX,
// 2026-12-02: AirNet's 2304 x 256 products ran 1.37x (7x7) and 1.09x (3x3) faster split; the
// smaller ones of SmallCNN and AirNet, up to 576 x 256 (590 KiB), as fast to 1.8x slower.
// DEMI_BF16_WEIGHT_GRAD=split|images forces one, for tests and A/B benchmarks.
bool split_weight_grad(const ConvGeom& g) {
  static const int forced = [] {  // 1 split, 0 images, -1 by size
    const char* env = std::getenv("DEMI_BF16_WEIGHT_GRAD");
    if (!env || !*env) return -1;
    if (std::strcmp(env, "split") == 0) return 1;
    DEMI_CHECK(std::strcmp(env, "images") == 0, "DEMI_BF16_WEIGHT_GRAD=", env, ": expected split or images");
    return 0;
  }();
  return forced >= 0 ? forced == 1 : g.ckk() * g.o * int64_t(sizeof(float)) > (1 << 20);
}

// Channels per panel of backward_weight_bf16_split: the fewest padded rows (to the tile's) on the
// busiest thread, the larger panel on a tie. AirNet's 256 channels of 9 taps on AMX: 7 a panel (63
// rows, 64 padded), 37 panels, 19 on the busier thread.
int64_t panel_channels(int64_t channels, int64_t taps, int threads) {
  int64_t best = 1, best_rows = std::numeric_limits<int64_t>::max();
  for (int64_t cp = 1; cp <= channels && (cp == 1 || cp * taps <= kWeightGradPanelRows); ++cp) {
    const int64_t rows = ceil_div(ceil_div(channels, cp), threads) * bf::m_padded(cp * taps);
    if (rows <= best_rows) best = cp, best_rows = rows;
  }
  return best;
}

// grad_w^T (ckk x o, fp32, zeroed) += col (ckk x depth) grad_y^T (depth x o), in chunks of images
// whose grad_y^T fits kWeightGradBBytes. The threads split grad_w^T's rows, not the images: each
// takes panels of whole channels, writes their im2col rows for the chunk (L2-resident) and runs the
// tile on them against the shared B. So C and A are each read from L2, not memory: with the
// images split instead, every group re-read the whole fp32 partial (2304 x 256 for AirNet's 7x7
// layers) and an im2col matrix larger than L2, once per 32 of B's columns. The sums keep one order,
// chunk after chunk, whatever the thread count. grad_b (fp64) goes into bias_sum.
void backward_weight_bf16_split(const Conv2dArgs& a, const ConvGeom& g, float* grad_wt, double* bias_sum) {
  const int64_t plane = g.plane(), image = g.c * g.h * g.w, taps = g.kh * g.kw;
  const BF16* input = a.input.as<BF16>();
  const BF16* grad_y = a.output.as<BF16>();
  const bool want_bias = a.bias.defined();
  const int64_t nr = isa::active().bf16.nr;
  const int64_t chunk = std::clamp<int64_t>(kWeightGradBBytes / (2 * bf::n_padded(g.o) * plane), 1, g.n);
  const int64_t per_panel = panel_channels(g.c, taps, available_threads()), panels = ceil_div(g.c, per_panel);
  const int64_t max_depth = chunk * plane, gy_ld = max_depth + max_depth % 2;
  // Shared by the threads: grad_y's rows for the chunk, then the same in pairs.
  BF16* gy = thread_scratch<BF16>(kSlotGradYT, g.o * gy_ld);
  uint16_t* pairs = thread_scratch<uint16_t>(kSlotPackedCol, bf::b_size(max_depth, g.o));
  for (int64_t i0 = 0; i0 < g.n; i0 += chunk) {
    const int64_t ni = std::min(chunk, g.n - i0), depth = ni * plane, ld = depth + depth % 2;
    parallel_for(ceil_div(g.o, nr), nr * depth, [&](int64_t begin, int64_t end) {
      const int64_t o0 = begin * nr, o1 = std::min(g.o, end * nr);
      for (int64_t o = o0; o < o1; ++o) {
        for (int64_t k = 0; k < ni; ++k) copy_short(grad_y + ((i0 + k) * g.o + o) * plane, plane, gy + o * ld + k * plane);
        if (want_bias) bias_sum[o] += sum_double(gy + o * ld, depth);  // the chunk's row at once, not plane by plane
      }
      bf::pack_bt(bits(gy) + o0 * ld, ld, depth, o1 - o0, pairs, o0);
    });
    bf::pad_b(pairs, depth, g.o);
    const int64_t lda = bf::k_padded(depth);
    parallel_for(panels, per_panel * taps * depth * g.o / 64, [&](int64_t begin, int64_t end) {
      ConvGeom gp = g;
      BF16* col = thread_scratch<BF16>(kSlotCol, bf::m_padded(per_panel * taps) * lda);
      for (int64_t p = begin; p < end; ++p) {
        const int64_t c0 = p * per_panel;
        gp.c = std::min(per_panel, g.c - c0);
        const int64_t rows = gp.c * taps;
        for (int64_t k = 0; k < ni; ++k) im2col(input + (i0 + k) * image + c0 * g.h * g.w, col + k * plane, gp, 0, g.oh, lda);
        bf::pad_a(bits(col), lda, rows, depth);
        bf::gemm(bits(col), lda, rows, depth, pairs, g.o, grad_wt + c0 * taps * g.o, g.o, nullptr, bf::Accumulate::Yes);
      }
    });
  }
}

template <typename T>
void forward(const Conv2dArgs& a, const ConvGeom& g) {
  using Acc = acc_t<T>;
  if constexpr (std::is_same_v<T, BF16>) {
    if (use_bf16_tile(g)) {
      const float* bias = bias_as<float>(a.bias, g.o);
      if (conv2d_implicit::takes(g)) return conv2d_implicit::forward(a, g, bias);
      return forward_bf16(a, g, bias);
    }
  }
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, rows = chunk_rows<Acc>(g);
  const ConstMatrixMap<Acc> w(widen<T, Acc>(a.weight.as<T>(), g.o * ckk, kSlotWeight), g.o, ckk);
  const Acc* bias = bias_as<Acc>(a.bias, g.o);
  const T* input = a.input.as<T>();
  T* output = a.output.as<T>();
  if constexpr (std::is_same_v<Acc, float>) return forward_packed<T>(a, g, w.data(), bias);
  for_each_image(g.n, image_threads(g.n), [&](int64_t i) {
    const T* x = input + i * image;
    Acc* y = result_buffer<T, Acc>(output + i * g.o * plane, g.o * plane, kSlotImage);
    if constexpr (std::is_same_v<T, Acc>) {
      if (g.pointwise()) {  // the image is its own column matrix
        MatrixMap<Acc>(y, g.o, plane).noalias() = w * ConstMatrixMap<Acc>(x, ckk, plane);
      }
    }
    if (!(std::is_same_v<T, Acc> && g.pointwise())) {
      // Eigen's GEMM only accumulates (C = A B zeroes C first): start C at the bias instead, which
      // saves the separate bias pass.
      MatrixMap<Acc> out(y, g.o, plane);
      if (bias) {
        out.colwise() = Eigen::Map<const Eigen::Matrix<Acc, Eigen::Dynamic, 1>>(bias, g.o);
      } else {
        out.setZero();
      }
      Acc* col = thread_scratch<Acc>(kSlotCol, ckk * rows * g.ow);
      for (int64_t oy = 0; oy < g.oh; oy += rows) {
        const int64_t end = std::min(g.oh, oy + rows), len = (end - oy) * g.ow;
        im2col(x, col, g, oy, end, len);
        StridedMap<Acc>(y + oy * g.ow, g.o, len, Eigen::OuterStride<>(plane)).noalias() +=
            w * ConstMatrixMap<Acc>(col, ckk, len);
      }
    } else if (bias) {
      MatrixMap<Acc>(y, g.o, plane).colwise() += Eigen::Map<const Eigen::Matrix<Acc, Eigen::Dynamic, 1>>(bias, g.o);
    }
    if constexpr (!std::is_same_v<T, Acc>) convert_n(y, output + i * g.o * plane, g.o * plane);
  });
}

template <typename T>
void backward_data(const Conv2dArgs& a, const ConvGeom& g) {
  using Acc = acc_t<T>;
  if constexpr (std::is_same_v<T, BF16>) {
    if (use_bf16_tile(g)) {
      if (conv2d_implicit::takes(g)) return conv2d_implicit::backward_data(a, g);
      return backward_data_bf16(a, g);
    }
  }
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, rows = chunk_rows<Acc>(g);
  const ConstMatrixMap<Acc> w(widen<T, Acc>(a.weight.as<T>(), g.o * ckk, kSlotWeight), g.o, ckk);
  const T* grad_y = a.output.as<T>();
  T* grad_x = a.input.as<T>();
  if constexpr (std::is_same_v<Acc, float>) return backward_data_packed<T>(a, g, w.data());
  for_each_image(g.n, image_threads(g.n), [&](int64_t i) {
    const Acc* gy = widen<T, Acc>(grad_y + i * g.o * plane, g.o * plane, kSlotGradY);
    Acc* gx = result_buffer<T, Acc>(grad_x + i * image, image, kSlotImage);
    if (g.pointwise()) {
      MatrixMap<Acc>(gx, g.c, plane).noalias() = w.transpose() * ConstMatrixMap<Acc>(gy, g.o, plane);
    } else {
      Acc* gcol = thread_scratch<Acc>(kSlotCol, ckk * rows * g.ow);
      std::fill(gx, gx + image, Acc(0));
      for (int64_t oy = 0; oy < g.oh; oy += rows) {
        const int64_t end = std::min(g.oh, oy + rows), len = (end - oy) * g.ow;
        MatrixMap<Acc>(gcol, ckk, len).noalias() =
            w.transpose() * ConstStridedMap<Acc>(gy + oy * g.ow, g.o, len, Eigen::OuterStride<>(plane));
        col2im(gcol, gx, g, oy, end, len);
      }
    }
    if constexpr (!std::is_same_v<T, Acc>) convert_n(gx, grad_x + i * image, image);
  });
}

// grad_w (o x ckk, as T) = the sum of the threads' partial grad_w^T (ckk x o each, wsize apart),
// spread over the threads in blocks of kBlock rows of grad_w^T: summed, transposed in a block
// buffer, then each of its o rows converted into grad_w. (Done by the calling thread, the sum,
// transpose and conversion of AirNet's 2304 x 256 left the other idle for 6% of a 7x7 layer's
// backward-weight.)
template <typename Acc, typename T>
void sum_transposed(const Acc* partial, int threads, int64_t ckk, int64_t o, T* grad_w) {
  constexpr int64_t kBlock = 16;
  const int64_t wsize = ckk * o;
  parallel_for(ceil_div(ckk, kBlock), kBlock * o * (threads + 2), [&](int64_t begin, int64_t end) {
    std::vector<Acc> block(kBlock * o);  // block[j * kBlock + r] = grad_w^T[k0 + r][j]
    for (int64_t b = begin; b < end; ++b) {
      const int64_t k0 = b * kBlock, rows = std::min(kBlock, ckk - k0);
      for (int64_t r = 0; r < rows; ++r) {
        const Acc* row = partial + (k0 + r) * o;
        for (int64_t j = 0; j < o; ++j) {
          Acc sum = row[j];
          for (int t = 1; t < threads; ++t) sum += row[t * wsize + j];
          block[j * kBlock + r] = sum;
        }
      }
      for (int64_t j = 0; j < o; ++j) convert_n(block.data() + j * kBlock, grad_w + j * ckk + k0, rows);
    }
  });
}

template <typename T>
void backward_weight(const Conv2dArgs& a, const ConvGeom& g) {
  using Acc = acc_t<T>;
  const int64_t ckk = g.ckk(), plane = g.plane(), image = g.c * g.h * g.w, wsize = g.o * ckk;
  const int64_t rows = chunk_rows<Acc>(g);
  // bf16 on the tile splits grad_w between the threads for the largest products (split_weight_grad);
  // every other path splits the images.
  const bool bf16_tile = std::is_same_v<T, BF16> && use_bf16_tile(g);
  const bool bf16_split = bf16_tile && split_weight_grad(g);
  const bool winograd = std::is_same_v<Acc, float> && !bf16_tile && use_winograd(g);  // writes grad_w itself
  const int threads = bf16_split ? 1 : image_threads(g.n);
  // One partial grad_w (and grad_b, in double) per thread, summed after the loop, so threads never
  // write the same memory and the result does not depend on timing.
  Acc* partial = winograd ? nullptr : thread_scratch<Acc>(kSlotPartial, threads * wsize);
  if (partial) {
    parallel_for(threads * wsize, 1, [&](int64_t begin, int64_t end) { std::fill(partial + begin, partial + end, Acc(0)); });
  }
  const bool want_bias = a.bias.defined();
  double* bias_partial = thread_scratch<double>(kSlotBiasPartial, threads * g.o);
  std::fill(bias_partial, bias_partial + threads * g.o, 0.0);
  const T* input = a.input.as<T>();
  const T* grad_y = a.output.as<T>();
  bool transposed = false;  // the packed path sums grad_w^T
  if constexpr (std::is_same_v<Acc, float>) {
    if (bf16_split) {
      backward_weight_bf16_split(a, g, partial, bias_partial);
    } else if (bf16_tile) {
      backward_weight_bf16(a, g, partial, bias_partial, threads);
    } else if (winograd) {
      backward_weight_winograd<T>(a, g, bias_partial, threads);
    } else {
      backward_weight_packed<T>(a, g, partial, bias_partial, threads);
    }
    transposed = true;
  }
  if (!transposed) {
    for_each_image(g.n, threads, [&](int64_t i) {
      const int t = threads > 1 ? omp_get_thread_num() : 0;
      const T* x = input + i * image;
      const Acc* gy = widen<T, Acc>(grad_y + i * g.o * plane, g.o * plane, kSlotGradY);
      MatrixMap<Acc> gw(partial + t * wsize, g.o, ckk);
      bool done = false;
      if constexpr (std::is_same_v<T, Acc>) {
        if (g.pointwise()) {  // the image is its own column matrix
          gw.noalias() += ConstMatrixMap<Acc>(gy, g.o, plane) * ConstMatrixMap<Acc>(x, ckk, plane).transpose();
          done = true;
        }
      }
      if (!done) {
        Acc* col = thread_scratch<Acc>(kSlotCol, ckk * rows * g.ow);
        for (int64_t oy = 0; oy < g.oh; oy += rows) {
          const int64_t end = std::min(g.oh, oy + rows), len = (end - oy) * g.ow;
          im2col(x, col, g, oy, end, len);
          gw.noalias() += ConstStridedMap<Acc>(gy + oy * g.ow, g.o, len, Eigen::OuterStride<>(plane)) *
                          ConstMatrixMap<Acc>(col, ckk, len).transpose();
        }
      }
      if (want_bias) {
        const ConstMatrixMap<Acc> gy_map(gy, g.o, plane);
        for (int64_t o = 0; o < g.o; ++o) bias_partial[t * g.o + o] += static_cast<double>(gy_map.row(o).sum());
      }
    });
  }
  for (int t = 1; t < threads; ++t) {
    for (int64_t o = 0; o < g.o; ++o) bias_partial[o] += bias_partial[t * g.o + o];
  }
  if (transposed) {
    if (!winograd) sum_transposed(partial, threads, ckk, g.o, a.weight.as<T>());
  } else {
    for (int t = 1; t < threads; ++t) {
      Eigen::Map<Eigen::Array<Acc, Eigen::Dynamic, 1>>(partial, wsize) +=
          Eigen::Map<const Eigen::Array<Acc, Eigen::Dynamic, 1>>(partial + t * wsize, wsize);
    }
    convert_n(partial, a.weight.as<T>(), wsize);
  }
  if (want_bias) {
    dispatch_floating(a.bias.dtype, "conv2d_backward_weight", [&](auto tag) {
      using B = decltype(tag);
      for (int64_t o = 0; o < g.o; ++o) a.bias.as<B>()[o] = round_to<B>(bias_partial[o]);
    });
  }
}

}  // namespace

// No image, no output position or no output channel: nothing to sum. The walks divide by these
// counts (a batch of 0 died of SIGFPE in balanced_group), so such calls stop here: the output is
// empty, and the gradients are zeros (all-zero bits are +0 in every floating dtype).
namespace {
bool nothing_to_sum(const ConvGeom& g) { return g.n == 0 || g.o == 0 || g.plane() == 0; }
void zero(const TensorRef& t) {
  if (t.defined() && t.numel() > 0) std::memset(t.data, 0, t.nbytes());
}
}  // namespace

void CpuKernels::conv2d_forward_impl(const Conv2dArgs& args, const ConvGeom& g) {
  if (nothing_to_sum(g)) return;  // the output has no element
  dispatch_floating(args.input.dtype, "conv2d_forward", [&](auto tag) { forward<decltype(tag)>(args, g); });
}

void CpuKernels::conv2d_backward_data_impl(const Conv2dArgs& args, const ConvGeom& g) {
  if (nothing_to_sum(g)) return zero(args.input);
  dispatch_floating(args.input.dtype, "conv2d_backward_data", [&](auto tag) { backward_data<decltype(tag)>(args, g); });
}

void CpuKernels::conv2d_backward_weight_impl(const Conv2dArgs& args, const ConvGeom& g) {
  if (nothing_to_sum(g)) {
    zero(args.weight);
    return zero(args.bias);
  }
  dispatch_floating(args.input.dtype, "conv2d_backward_weight",
                    [&](auto tag) { backward_weight<decltype(tag)>(args, g); });
}

}  // namespace demi::backend::cpu

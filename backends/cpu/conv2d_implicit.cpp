// Implicit-GEMM bf16 convolutions (conv2d_implicit.h). A stride-1 convolution is seen on the
// padded grid: in a group of images, image i's position (y, x) of its hp x wp padded plane is q = i
// * plane + y * wp + x, and output (oy, ox) sits at the position q of its top-left tap, so tap
// (ky, kx) reads position q + ky * wp + kx: one constant offset per tap for every output. The tile's
// B operand is then the padded input itself, shifted by the tap's offset, and no im2col matrix is
// written. Neighbours share their padding: a row's right padding is the next row's left (wp = w +
// pw), an image's bottom padding rows the next image's top (hp = h + ph); the right and bottom
// padding an output reads is never wider than the left and top, so it lands there (after the last
// image, on zeros past the group). Outputs are computed for every position up to the group's last
// valid one; those on padding are computed and dropped (the price: plane / (oh * ow) more
// multiplies; with padding 1, 1.07x on 32x32 planes, 1.14x on 15x15, 1.31x on 7x7).
// Small planes, where that price is high (7x7, 3x3), gather each strip of the tile's columns from
// the padded pairs at the output positions only, then run the tile on the strip: B is written once
// more, but neither im2col's matrix nor its packing into pairs nor (backward-data) col2im's fp32
// columns. Against im2col on Zen 4, AirNet's 7x7 layers ran 5-12% faster and its 3x3 one 30-40%
// (forward and backward-data, 2026-12-02).
//
// forward: C[o][q] = sum over taps t and channels c of W[o][c][t] x[c][q + offset(t)], with x in
// pairs of channels per 32-bit word (the tile's B layout, isa.h) and W in rows [tap][channel].
// backward-data: the same with grad_y for x and the flipped, transposed weights, padding k - 1 - p.
// backward-weight stays on im2col (conv2d_bf16.cpp): as an implicit GEMM (per tap, grad_y on the padded
// grid, shifted, times the input transposed into pairs of positions) it ran 10% faster on 32x32
// planes and 15-20% slower on 16x16 ones (AMX, 2026-12-02).
#include "backends/cpu/conv2d_implicit.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_walk.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/tuning.h"

namespace demi::backend::cpu::conv2d_implicit {
namespace {

using namespace conv2d_walk;
namespace bf = packed_gemm_bf16;
using BF16 = Eigen::bfloat16;

// Columns (positions) of a group of images: enough to amortise the per-group set-up.
constexpr int64_t kMinColumns = 512;

// A stride-1 convolution's padded grid: input h x w padded by (ph, pw), kernel kh x kw.
struct Grid {
  int64_t h, w, ph, pw, kh, kw;
  int64_t hp() const { return h + ph; }  // top padding and the rows (the bottom is the next image's top)
  int64_t wp() const { return w + pw; }  // left padding and the row (the right is the next row's left)
  int64_t plane() const { return hp() * wp(); }
  int64_t oh() const { return h + 2 * ph - kh + 1; }
  int64_t ow() const { return w + 2 * pw - kw + 1; }
  int64_t taps() const { return kh * kw; }
  int64_t offset(int64_t tap) const { return tap / kw * wp() + tap % kw; }
  int64_t max_offset() const { return offset(taps() - 1); }
  // Positions up to and including a group of ni images' last valid output.
  int64_t columns(int64_t ni) const { return (ni - 1) * plane() + (oh() - 1) * wp() + ow(); }
};

// Calls row(y, dst) for each row y of the image's h rows, with dst its place on the padded plane at
// `plane`, after zeroing the padding before it (the top rows and each row's left columns).
template <typename T, typename Row>
void on_padded_plane(const Grid& gd, T* plane, Row&& row) {
  const int64_t wp = gd.wp();
  for (int64_t y = 0; y < gd.h; ++y) {
    T* dst = plane + (gd.ph + y) * wp + gd.pw;
    std::fill(y == 0 ? plane : dst - gd.pw, dst, T(0));  // the top rows with the first row's left padding
    row(y, dst);
  }
}

// Channels [0, cpad) of images [i0, i0 + ni) of x (ins channels) on the padded grid, in pairs: word
// c2 * stride + q holds channel 2 c2 (low half) and 2 c2 + 1 (high half) at position q; zero in the
// padding, past the channels and from the group's last position up to stride.
void to_pairs(const uint16_t* x, int64_t ins, int64_t i0, int64_t ni, const Grid& gd, int64_t cpad, int64_t stride,
              uint32_t* out) {
  const int64_t image = gd.h * gd.w, plane = gd.plane();
  for (int64_t c2 = 0; c2 < cpad / 2; ++c2) {
    uint32_t* dst = out + c2 * stride;
    for (int64_t i = 0; i < ni; ++i) {
      const int64_t c = 2 * c2;
      const uint16_t* lo = c < ins ? x + ((i0 + i) * ins + c) * image : nullptr;
      const uint16_t* hi = c + 1 < ins ? lo + image : nullptr;
      on_padded_plane(gd, dst + i * plane, [&](int64_t y, uint32_t* row) {
        if (hi) {
          for (int64_t j = 0; j < gd.w; ++j) row[j] = lo[y * gd.w + j] | uint32_t{hi[y * gd.w + j]} << 16;
        } else if (lo) {
          for (int64_t j = 0; j < gd.w; ++j) row[j] = lo[y * gd.w + j];
        } else {
          std::fill(row, row + gd.w, 0u);
        }
      });
    }
    std::fill(dst + ni * plane, dst + stride, 0u);
  }
}

// The weights as the tile's A in the calling thread's kSlotPacked: bf::m_padded(rows) rows of taps *
// cpad values, A[r][t * cpad + k] = weight(r, k, t) for k < ks, zero past ks and past the rows.
template <typename Weight>
const uint16_t* pack_taps(int64_t rows, int64_t ks, int64_t taps, int64_t cpad, Weight&& weight) {
  const int64_t lda = taps * cpad, padded = bf::m_padded(rows);
  uint16_t* a = thread_scratch<uint16_t>(kSlotPacked, padded * lda);
  parallel_for(padded, lda, [&](int64_t begin, int64_t end) {  // not left to one thread: see winograd_weights
    std::fill(a + begin * lda, a + end * lda, uint16_t{0});
    for (int64_t r = begin; r < std::min(end, rows); ++r) {
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t k = 0; k < ks; ++k) a[r * lda + t * cpad + k] = weight(r, k, t);
      }
    }
  });
  return a;
}

// Whether the tile runs on the padded grid itself, rather than on gathered strips: computing the
// grid costs outs * plane per image, gathering costs outs * outputs plus the gather, which on Zen 4
// cost as much as about kGatherCost more output channels (it writes every column's k values once,
// the tile reads them outs / mr times). Measured there, 2026-12-02, ms of AirNet's and SmallCNN's
// layers on the grid against gathered: 7x7 with 256 outputs 24 vs 21, 3x3 with 256 7.2 vs 4.4,
// 8x8 with 64 4.1 vs 4.7, 15x15 with 64 6.9 vs 9.3 (the rule agrees with all four). On an AMX Xeon
// the same day, grid and gathered ran within 5% of each other on every layer of both nets, so the
// rule stands there too.
constexpr int64_t kGatherCost = 48;
bool on_grid(const Grid& gd, int64_t outs) {
  return gd.plane() * outs <= gd.oh() * gd.ow() * (outs + kGatherCost);
}

// out (n images of outs channels, gd.oh() x gd.ow()) = in (n images of ins channels, gd.h x gd.w)
// convolved with A (pack_taps, outs rows, cpad = bf::k_padded(ins)) + bias, rounded once to bf16
// by the tile itself (no fp32 C in memory). On the grid (on_grid), the tile reads the padded pairs
// at each tap's offset; otherwise each strip of the tile's columns is gathered from them first, so
// that only output positions are computed, at the price of writing B once per strip.
void convolve(const uint16_t* in, int64_t n, int64_t ins, const Grid& gd, const uint16_t* a, int64_t outs,
              const float* bias, uint16_t* out) {
  const isa::Bf16Gemm& t = isa::active().bf16;
  const int64_t cpad = bf::k_padded(ins), taps = gd.taps(), lda = taps * cpad, plane = gd.plane();
  const int64_t oh = gd.oh(), ow = gd.ow(), wp = gd.wp(), outputs = oh * ow;
  const bool grid = on_grid(gd, outs);
  std::vector<int64_t> offsets(taps);  // in positions (32-bit words of pairs)
  for (int64_t tap = 0; tap < taps; ++tap) offsets[tap] = gd.offset(tap);
  std::vector<int64_t> b_offsets(taps);  // the same in bf16 elements, for the tile
  for (int64_t tap = 0; tap < taps; ++tap) b_offsets[tap] = 2 * offsets[tap];
  const int64_t per_group = grid ? plane : outputs;
  const Walk wk{balanced_group(n, ceil_div(kMinColumns, per_group), available_threads()), 0};
  for_each_group(n, wk, 0, [&](int64_t i0, int64_t ni) {
    // Grid positions up to the last output, then the tiles' reads past it: up to nr - 1 positions
    // (on the grid) plus the largest offset.
    const int64_t cols = grid ? gd.columns(ni) : ni * outputs, ldc = bf::n_padded(cols);
    const int64_t stride = bf::n_padded(gd.columns(ni)) + gd.max_offset();
    uint32_t* pairs = thread_scratch<uint32_t>(kSlotCol, cpad / 2 * stride);
    uint16_t* c = thread_scratch<uint16_t>(kSlotImage, outs * ldc);  // C rounded to bf16 by the tile
    uint32_t* strip = grid ? nullptr : thread_scratch<uint32_t>(kSlotPackedCol, lda / 2 * t.nr);
    to_pairs(in, ins, i0, ni, gd, cpad, stride, pairs);
    if (t.prepare) t.prepare();
    std::vector<int32_t> at(t.nr);
    for (int64_t col = 0; col < cols; col += t.nr) {
      const int64_t count = std::min(t.nr, cols - col);
      const uint16_t* b = reinterpret_cast<const uint16_t*>(pairs) + 2 * col;
      int64_t ldb = 2 * stride, kp = cpad, tile_taps = taps;
      if (!grid) {  // compact column q is image q / outputs's output (oy, ox)
        for (int64_t j = 0; j < t.nr; ++j) {
          const int64_t q = col + std::min(j, count - 1), r = q % outputs;
          at[j] = static_cast<int32_t>(q / outputs * plane + r / ow * wp + r % ow);
        }
        // One channel pair's rows for every tap at a time: its few cache lines serve all the taps.
        for (int64_t c2 = 0; c2 < cpad / 2; ++c2) {
          t.gather_taps(pairs + c2 * stride, offsets.data(), taps, at.data(), t.nr, strip + c2 * t.nr, cpad / 2 * t.nr);
        }
        b = reinterpret_cast<const uint16_t*>(strip), ldb = 2 * t.nr, kp = lda, tile_taps = 1;
      }
      for (int64_t p = 0; p < outs; p += t.mr) {
        t.tile({a + p * lda, lda, b, ldb, nullptr, ldc, kp, std::min(t.mr, outs - p), count,
                bias ? bias + p : nullptr, false, tile_taps, grid ? b_offsets.data() : nullptr, c + p * ldc + col});
      }
    }
    for (int64_t i = 0; i < ni; ++i) {
      for (int64_t o = 0; o < outs; ++o) {
        uint16_t* dst = out + ((i0 + i) * outs + o) * outputs;
        if (!grid) {
          copy_short(c + o * ldc + i * outputs, outputs, dst);
          continue;
        }
        for (int64_t oy = 0; oy < oh; ++oy) copy_short(c + o * ldc + i * plane + oy * wp, ow, dst + oy * ow);
      }
    }
  });
}

const uint16_t* bits(const TensorRef& t) { return reinterpret_cast<const uint16_t*>(t.as<BF16>()); }
uint16_t* mutable_bits(const TensorRef& t) { return reinterpret_cast<uint16_t*>(t.as<BF16>()); }

}  // namespace

bool takes(const ConvGeom& g) {
  // DEMI_IMPLICIT_CONV=0 turns this path off, for A/B benchmarks.
  if (!tuning().implicit_conv || g.sh != 1 || g.sw != 1 || g.ph >= g.kh || g.pw >= g.kw) return false;
  // Channels go through the tile in blocks of 32 (AMX's k): a block of 3 would be mostly zeros.
  return g.c >= 16 && g.o >= 16;
}

void forward(const Conv2dArgs& a, const ConvGeom& g, const float* bias) {
  const Grid gd{g.h, g.w, g.ph, g.pw, g.kh, g.kw};
  const int64_t taps = gd.taps();
  const uint16_t* w = bits(a.weight);
  const uint16_t* packed = pack_taps(g.o, g.c, taps, bf::k_padded(g.c),
                                     [&](int64_t o, int64_t c, int64_t t) { return w[(o * g.c + c) * taps + t]; });
  convolve(bits(a.input), g.n, g.c, gd, packed, g.o, bias, mutable_bits(a.output));
}

void backward_data(const Conv2dArgs& a, const ConvGeom& g) {
  const Grid gd{g.oh, g.ow, g.kh - 1 - g.ph, g.kw - 1 - g.pw, g.kh, g.kw};  // gd.oh() == g.h
  const int64_t taps = gd.taps();
  const uint16_t* w = bits(a.weight);
  const uint16_t* packed = pack_taps(g.c, g.o, taps, bf::k_padded(g.o), [&](int64_t c, int64_t o, int64_t t) {
    return w[(o * g.c + c) * taps + (taps - 1 - t)];  // tap (ky, kx) of the flipped kernel
  });
  convolve(bits(a.output), g.n, g.o, gd, packed, g.c, nullptr, mutable_bits(a.input));
}

}  // namespace demi::backend::cpu::conv2d_implicit

// conv2d_paths.h's bf16 path: bf16 convolutions on the ISA level's bf16 tile (AMX, AVX512_BF16, or
// the scalar oracle). The operands stay bf16 (each product exact in fp32), sums are fp32 and the
// output is rounded once. im2col writes bf16 columns, half the bytes of fp32 ones, and packing them
// into pairs of k rows (packed_gemm.h) is one more pass over them. Which convolutions take this
// path is the level's isa::Bf16Route (3x3 ones only where the tile beats fp32 Winograd: AMX, and
// Zen 4's vdpbf16ps).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cpu/conv2d_paths.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/tuning.h"

namespace demi::backend::cpu::conv2d_paths {

namespace bf = packed_gemm_bf16;

bool use_bf16_tile(const ConvGeom& g) {
  const isa::Bf16Route route = isa::active().bf16_route;
  return route == isa::Bf16Route::Everything || (route == isa::Bf16Route::NonWinograd && !use_winograd(g));
}

namespace {

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

}  // namespace

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

// Whether bf16 backward-weight splits grad_w between the threads (backward_weight_bf16_split)
// rather than the images (backward_weight_bf16): when a thread's own fp32 partial grad_w would not
// fit L2 (1 MiB on Zen 4), which the tile re-reads at every group of images. Measured on AMX,
// 2026-12-02: AirNet's 2304 x 256 products ran 1.37x (7x7) and 1.09x (3x3) faster split; the
// smaller ones of SmallCNN and AirNet, up to 576 x 256 (590 KiB), as fast to 1.8x slower.
// DEMI_BF16_WEIGHT_GRAD=split|images forces one, for tests and A/B benchmarks.
bool split_weight_grad(const ConvGeom& g) {
  switch (tuning().bf16_weight_grad) {
    case Tuning::WeightGrad::Split: return true;
    case Tuning::WeightGrad::Images: return false;
    case Tuning::WeightGrad::BySize: break;
  }
  return g.ckk() * g.o * int64_t(sizeof(float)) > (1 << 20);
}

namespace {

// The bytes of backward-weight's B (grad_y^T of a chunk of images, in pairs) that each core keeps
// in its L2 while it walks its panels of grad_w^T's rows.
constexpr int64_t kWeightGradBBytes = 512 << 10;
// The most rows of grad_w^T (channels x taps) in a panel: its im2col (rows x depth) stays in L2.
constexpr int64_t kWeightGradPanelRows = 128;

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

}  // namespace

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

}  // namespace demi::backend::cpu::conv2d_paths

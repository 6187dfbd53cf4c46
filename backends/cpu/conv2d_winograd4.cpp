// Winograd F(4x4, 3x3) for half-precision convolutions (conv2d_winograd4.h has the transforms and
// why). Layouts, as winograd.h's F(2x2): U[xi][out][in] (36 points, xi = 6 * row + column of the 6x6
// tile), V[xi][in][column] and M[xi][out][column], one column per 4x4 tile of a group of images,
// column = image * tiles + ty * tw + tx.
#include "backends/cpu/conv2d_winograd4.h"

#include <algorithm>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_walk.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/tuning.h"
#include "backends/cpu/winograd.h"

namespace demi::backend::cpu::conv2d_winograd4 {
namespace {

using namespace conv2d_walk;

constexpr int64_t kPoints = 36;

// The most summed channels for which F(4x4)'s error stays within a bf16 result's bound (the header).
constexpr int64_t kMaxChannels = 64;

// Columns (tiles) per group of images: V and M are 36 points x channels x columns, 128 columns
// being 4.5 MiB each at 256 channels (F(2x2)'s groups hold 128 tiles of 4 outputs, 16 points).
constexpr int64_t kCols = 64;

// The transforms run several small planes side by side (lane groups, as winograd.h's): as many images
// as leave at most kLanes tiles a row, two AVX2 vectors or one AVX-512 one.
constexpr int64_t kLanes = 16;

// y_i = sum_r B^T[i][r] x_r, elementwise over n: six rows in, six rows out (y_i = y + i * ys). Each
// output row is its own __restrict pointer: rows derived from one pointer might overlap as far as GCC
// can tell, and it left the loop scalar (F(4x4) layers 1.07-1.3x slower).
void bt_rows6(const float* __restrict x0, const float* __restrict x1, const float* __restrict x2,
              const float* __restrict x3, const float* __restrict x4, const float* __restrict x5, float* __restrict y0,
              float* __restrict y1, float* __restrict y2, float* __restrict y3, float* __restrict y4,
              float* __restrict y5, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const float a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k], a4 = x4[k], a5 = x5[k];
    y0[k] = (a0 - 2.0f * a2 + a4) + 1.5f * (a3 - a1);
    y1[k] = (a1 - 2.5f * a2 + a4) + 0.5f * a3;
    y2[k] = (a4 - a1 + 0.5f * a2) + 2.5f * a3;
    y3[k] = (a4 - a2) + 2.0f * (a3 - a1);
    y4[k] = (a4 - a2) + 0.5f * (a1 - a3);
    y5[k] = (a1 - 2.0f * a3 + a5) + 1.5f * (a4 - a2);
  }
}
void bt_rows(const float* x0, const float* x1, const float* x2, const float* x3, const float* x4, const float* x5,
             float* y, int64_t ys, int64_t n) {
  bt_rows6(x0, x1, x2, x3, x4, x5, y, y + ys, y + 2 * ys, y + 3 * ys, y + 4 * ys, y + 5 * ys, n);
}

// y_i = sum_r A^T[i][r] x_r, elementwise over n: six rows in, four rows out (y_i = y + i * ys), each
// its own __restrict pointer as in bt_rows.
void at_rows4(const float* __restrict x0, const float* __restrict x1, const float* __restrict x2,
              const float* __restrict x3, const float* __restrict x4, const float* __restrict x5, float* __restrict y0,
              float* __restrict y1, float* __restrict y2, float* __restrict y3, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const float a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k], a4 = x4[k], a5 = x5[k];
    const float sum = a2 + a1, diff = a2 - a1;
    y0[k] = a0 + sum + a3 + a4;
    y1[k] = diff + 0.5f * a3 - 2.0f * a4;
    y2[k] = sum + 0.25f * a3 + 4.0f * a4;
    y3[k] = diff + 0.125f * a3 - 8.0f * a4 + a5;
  }
}
void at_rows(const float* x0, const float* x1, const float* x2, const float* x3, const float* x4, const float* x5,
             float* y, int64_t ys, int64_t n) {
  at_rows4(x0, x1, x2, x3, x4, x5, y, y + ys, y + 2 * ys, y + 3 * ys, n);
}

// U[xi * outs * ins + o * ins + i] = (G g G^T)[xi] for output channels [o_begin, o_end), in double,
// rounded once; g as winograd::filter_tap reads it (w[o][i], or w[i][o] rotated when adjoint).
void transform_weights(const float* w, int64_t outs, int64_t ins, bool adjoint, float* u, int64_t o_begin,
                       int64_t o_end) {
  constexpr int64_t kBlock = 8;
  const int64_t step = outs * ins;
  auto g_rows = [](const double* a, const double* b, const double* c, double* out, int64_t stride, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {  // G times the column (a, b, c), elementwise over the block
      out[k] = a[k];
      out[stride + k] = (b[k] - a[k] - c[k]) / 3.0;
      out[2 * stride + k] = (a[k] + b[k] + c[k]) / 3.0;
      out[3 * stride + k] = -(16.0 * a[k] + 8.0 * b[k] + 4.0 * c[k]) / 15.0;
      out[4 * stride + k] = (a[k] - 2.0 * b[k] + 4.0 * c[k]) / 15.0;
      out[5 * stride + k] = c[k];
    }
  };
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t i0 = 0; i0 < ins; i0 += kBlock) {
      const int64_t n = std::min(kBlock, ins - i0);
      double g[3][3][kBlock];
      for (int64_t k = 0; k < n; ++k) {
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c) g[r][c][k] = winograd::filter_tap(w, outs, ins, adjoint, o, i0 + k, r, c);
      }
      double gg[3][6][kBlock];  // gg[c][a] = (G g)[a][c]
      for (int c = 0; c < 3; ++c) g_rows(g[0][c], g[1][c], g[2][c], gg[c][0], kBlock, n);
      double ggg[6][6][kBlock];  // ((G g) G^T)[a][b] at ggg[a][b]
      for (int a = 0; a < 6; ++a) g_rows(gg[0][a], gg[1][a], gg[2][a], ggg[a][0], kBlock, n);
      for (int a = 0; a < 6; ++a) {
        for (int b = 0; b < 6; ++b) {
          float* row = u + (a * 6 + b) * step + o * ins + i0;
          for (int64_t k = 0; k < n; ++k) row[k] = static_cast<float>(ggg[a][b][k]);
        }
      }
    }
  }
}

}  // namespace

bool takes(DType dtype, int64_t channels, int64_t outs) {
  // The GEMMs' saving grows with channels x outs, the transforms' cost with channels + outs.
  // bench_kernels minima, F(4x4) against F(2x2), on an AMX Xeon under DEMI_CPU_ISA=avx2 and avx512
  // (docs/BENCHMARKS.md, 2026-12-04, once bt_rows was vector code):
  // - 8 lanes (avx2): F(4x4) faster in every layer of both nets up to 64 channels summed: 32 -> 32
  //   1.20x, 64 -> 24 1.29x, 64 -> 32 1.31x, 24 -> 64 1.31x, 64 -> 64 1.44x, 64 -> 256 1.52x. (On the
  //   AVX2 EPYC, with bt_rows still scalar, 32 -> 32 and 64 -> 24 had been slower: 0.94x, 0.88x.)
  // - 16 lanes (avx512 and up): F(2x2) gains twice what F(4x4) gains from AVX-512 (64 -> 64: 2.0x
  //   against 1.4x over avx2), and F(4x4) wins only where the GEMMs dominate most: 64 -> 256 1.22x,
  //   64 -> 64 even (0.99-1.03x), 64 -> 128 0.90x, 32 -> 64 0.92x, 24 -> 64 0.95x. Neither bt_rows and
  //   at_rows compiled 16 lanes wide nor 96 or 144 columns a group changed that (docs/BENCHMARKS.md).
  const int64_t min_products = isa::active().winograd.lanes >= 16 ? 16384 : 1024;
  return tuning().winograd_f4 && dtype == DType::BF16 && channels <= kMaxChannels && channels * outs >= min_products;
}

template <typename T>
void conv(const T* input, int64_t n, int64_t ins, int64_t h, int64_t w, const float* weight, int64_t outs,
          bool adjoint, const float* bias, T* output) {
  static_assert(!std::is_same_v<T, float>, "F(4x4) is for half results only");
  const float* u = winograd::packed_weights(kPoints, outs, ins, [&](float* dst, int64_t begin, int64_t end) {
    transform_weights(weight, outs, ins, adjoint, dst, begin, end);
  });
  const isa::Winograd4& moves = isa::active().winograd4;
  const int64_t panel = packed_gemm::packed_size(outs, ins), plane = h * w;
  const int64_t th = ceil_div(h, 4), tw = ceil_div(w, 4), tiles = th * tw, ph = 4 * th + 2;
  const int64_t group_images = std::max<int64_t>(1, kLanes / tw), max_lanes = group_images * tw;
  const int64_t per_group = balanced_group(n, ceil_div(kCols, tiles), available_threads());
  const int64_t row = ceil_div(per_group * tiles, 16) * 16;  // a channel's columns, whole lines
  const int64_t v_point = odd_lines(ins * row), m_point = odd_lines(outs * row);
  for_each_group(n, Walk{per_group, 0}, 0, [&](int64_t i0, int64_t ni) {
    const int64_t cols = ni * tiles;
    float* v = thread_scratch<float>(kSlotCol, kPoints * v_point);
    float* m = thread_scratch<float>(kSlotImage, kPoints * m_point);
    // views: column s of every tile, 6 x ph rows of max_lanes (below); t: B^T of a row of tiles' views,
    // 36 rows of max_lanes; s: an output channel's 24 rows of A^T m; line: one zero-padded input row,
    // or an output row's four runs.
    const int64_t view = ph * max_lanes;
    const int64_t line_size = std::max(4 * tw + 2, 4 * max_lanes);
    float* views = thread_scratch<float>(kSlotGradY, 6 * view + 36 * max_lanes + 24 * row + line_size);
    float* t = views + 6 * view;
    float* sm = t + 36 * max_lanes;
    float* line = sm + 24 * row;
    float* wide = thread_scratch<float>(kSlotWide, group_images * plane);
    std::fill(views, views + 6 * view, 0.0f);  // padding rows stay zero; the plane's rows are rewritten
    std::fill(line, line + line_size, 0.0f);  // line[0] and past the row stay zero until the output
    for (int64_t c = 0; c < ins; ++c) {
      for (int64_t k0 = 0; k0 < ni; k0 += group_images) {
        const int64_t images = std::min(group_images, ni - k0), lanes = images * tw;
        // views[s * view + y * max_lanes + g * tw + tx] = padded row y, column 4 tx + s, of image k0 + g:
        // every step of B^T d B is then whole-row arithmetic over the group's lanes.
        for (int64_t g = 0; g < images; ++g) {
          const T* x = input + ((i0 + k0 + g) * ins + c) * plane;
          for (int64_t y = 0; y < h; ++y) {
            convert_n(x + y * w, line + 1, w);
            moves.split_row(line, tw, views + (y + 1) * max_lanes + g * tw, view);
          }
        }
        for (int64_t ty = 0; ty < th; ++ty) {
          for (int64_t j = 0; j < 6; ++j) {  // t[(i * 6 + j) * max_lanes] = (B^T d)[i][j]
            const float* p = views + j * view + 4 * ty * max_lanes;
            bt_rows(p, p + max_lanes, p + 2 * max_lanes, p + 3 * max_lanes, p + 4 * max_lanes, p + 5 * max_lanes,
                    t + j * max_lanes, 6 * max_lanes, lanes);
          }
          float* vt = v + c * row + k0 * tiles + ty * lanes;  // the group's columns, row of tiles by row
          for (int64_t i = 0; i < 6; ++i) {
            const float* ti = t + i * 6 * max_lanes;
            bt_rows(ti, ti + max_lanes, ti + 2 * max_lanes, ti + 3 * max_lanes, ti + 4 * max_lanes, ti + 5 * max_lanes,
                    vt + i * 6 * v_point, v_point, lanes);
          }
        }
      }
    }
    for (int64_t xi = 0; xi < kPoints; ++xi) {
      packed_gemm::gemm(u + xi * panel, outs, ins, v + xi * v_point, row, cols, m + xi * m_point, row, nullptr);
    }
    for (int64_t o = 0; o < outs; ++o) {
      for (int64_t j = 0; j < 6; ++j) {  // sm[(i * 6 + j) * row] = (A^T m)[i][j], every column at once
        const float* mj = m + j * m_point + o * row;
        at_rows(mj, mj + 6 * m_point, mj + 12 * m_point, mj + 18 * m_point, mj + 24 * m_point, mj + 30 * m_point,
                sm + j * row, 6 * row, cols);
      }
      const float b = bias ? bias[o] : 0.0f;
      for (int64_t k0 = 0; k0 < ni; k0 += group_images) {
        const int64_t images = std::min(group_images, ni - k0), lanes = images * tw;
        for (int64_t ty = 0; ty < th; ++ty) {
          for (int64_t i = 0; i < 4 && 4 * ty + i < h; ++i) {
            // Output row 4 ty + i of the group's row of tiles: columns 4 tx + j of image g at
            // line[j * lanes + g * tw + tx], then interleaved into each plane.
            const float* si = sm + i * 6 * row + k0 * tiles + ty * lanes;
            at_rows(si, si + row, si + 2 * row, si + 3 * row, si + 4 * row, si + 5 * row, line, lanes, lanes);
            for (int64_t g = 0; g < images; ++g) {
              moves.interleave_row(line + g * tw, lanes, w, b, wide + g * plane + (4 * ty + i) * w);
            }
          }
        }
        for (int64_t g = 0; g < images; ++g) convert_n(wide + g * plane, output + ((i0 + k0 + g) * outs + o) * plane, plane);
      }
    }
  });
}

template void conv<Eigen::half>(const Eigen::half*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, bool,
                                const float*, Eigen::half*);
template void conv<Eigen::bfloat16>(const Eigen::bfloat16*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t,
                                    bool, const float*, Eigen::bfloat16*);

}  // namespace demi::backend::cpu::conv2d_winograd4

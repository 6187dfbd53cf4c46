// conv2d_paths.h's Winograd F(2x2, 3x3) path (winograd.h) for 3x3 / stride 1 / padding 1
// convolutions, all three passes, on the ISA level's transforms and fp32 tile: fp32, and half data
// widened to fp32 (conv2d.cpp sends bf16 results to F(4x4) instead where its error allows,
// conv2d_winograd4.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cpu/conv2d_paths.h"
#include "backends/cpu/isa/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/tuning.h"
#include "backends/cpu/winograd.h"

namespace demi::backend::cpu::conv2d_paths {

// Whether a convolution runs as Winograd F(2x2, 3x3): 3x3, stride 1, padding 1 (SmallCNN's and
// AirNet's), enough channels for the 16 GEMMs to dominate the transforms, and planes large enough
// that whole 2x2 tiles do not waste the saving: a 3x3 plane computes 16 outputs for 9, 0.79x the
// direct multiplies (7x7 is 0.58x, 32x32 0.44x), and still ran AirNet's 256 -> 256 @ 3x3 20-30%
// faster than im2col in all three passes (AMX Xeon, avx512 and avx2 levels); 1x1 or 1xN planes
// (2x or more the multiplies) do not. DEMI_WINOGRAD=0 turns it off, for benchmarks.
bool use_winograd(const ConvGeom& g) {
  if (!tuning().winograd || g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.ph != 1 || g.pw != 1) return false;
  if (g.c < 16 || g.o < 16) return false;
  const int64_t tiles = ceil_div(g.oh, 2) * ceil_div(g.ow, 2);
  return 16 * tiles <= 8 * g.plane();  // <= 0.89x the direct convolution's multiplies
}

namespace {

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
  if (const int64_t forced = tuning().winograd_dot_cols) return forced;
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

}  // namespace

template <typename T>
void forward_winograd(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias) {
  winograd_conv(a.input.as<T>(), g.n, g.c, g.h, g.w, winograd_weights(w, g.o, g.c, false), g.o, bias, a.output.as<T>());
}

// grad_x = grad_y convolved with the flipped, transposed weights.
template <typename T>
void backward_data_winograd(const Conv2dArgs& a, const ConvGeom& g, const float* w) {
  winograd_conv(a.output.as<T>(), g.n, g.o, g.oh, g.ow, winograd_weights(w, g.c, g.o, true), g.c, nullptr,
                a.input.as<T>());
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

template void forward_winograd<float>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void forward_winograd<Eigen::half>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void forward_winograd<BF16>(const Conv2dArgs&, const ConvGeom&, const float*, const float*);
template void backward_data_winograd<float>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_data_winograd<Eigen::half>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_data_winograd<BF16>(const Conv2dArgs&, const ConvGeom&, const float*);
template void backward_weight_winograd<float>(const Conv2dArgs&, const ConvGeom&, double*, int);
template void backward_weight_winograd<Eigen::half>(const Conv2dArgs&, const ConvGeom&, double*, int);
template void backward_weight_winograd<BF16>(const Conv2dArgs&, const ConvGeom&, double*, int);

}  // namespace demi::backend::cpu::conv2d_paths

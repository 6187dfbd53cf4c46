// CpuKernels::conv2d_*: NCHW convolution, images spread over threads, in chunks of output rows or
// groups of small images. This file chooses each pass's path and holds the im2col and col2im that
// the paths share (conv2d_paths.h). fp16 (and bf16 without a bf16 tile) is widened to fp32 on the
// way in and rounded once on output, and runs as fp32 does: 3x3 / stride 1 / padding 1
// convolutions as Winograd F(2x2, 3x3) in all three passes (conv2d_winograd.cpp), or for bf16
// results whose error allows, F(4x4, 3x3) in forward and backward-data (conv2d_winograd4.h); the
// rest as im2col + packed_gemm.h's GEMMs with the tile of the ISA level in use (conv2d_packed.cpp).
// bf16 with a bf16 tile (AMX, AVX512_BF16) stays bf16 into the tile (conv2d_bf16.cpp), and its
// stride-1 forward and backward-data passes run as implicit GEMMs (conv2d_implicit.h, no im2col).
// fp64 (gradcheck) runs im2col + Eigen, here. backward_data is GEMM + col2im; backward_weight sums
// per thread.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/common.h"
#include "backends/cpu/conv2d_implicit.h"
#include "backends/cpu/conv2d_paths.h"
#include "backends/cpu/conv2d_winograd4.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/isa/isa.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace conv2d_paths {
namespace {

// Output columns [begin, end) whose input column ox * stride - pad + k falls inside [0, size).
void valid_range(int64_t size, int64_t out, int64_t stride, int64_t pad, int64_t k, int64_t& begin,
                 int64_t& end) {
  begin = std::clamp<int64_t>(ceil_div(pad - k, stride), 0, out);
  end = std::clamp<int64_t>(ceil_div(size + pad - k, stride), begin, out);
}

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

}  // namespace

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

template void im2col<float, float>(const float*, float*, const ConvGeom&, int64_t, int64_t, int64_t);
template void im2col<Eigen::half, float>(const Eigen::half*, float*, const ConvGeom&, int64_t, int64_t, int64_t);
template void im2col<BF16, float>(const BF16*, float*, const ConvGeom&, int64_t, int64_t, int64_t);
template void im2col<BF16, BF16>(const BF16*, BF16*, const ConvGeom&, int64_t, int64_t, int64_t);
template void col2im<float>(float*, float*, const ConvGeom&, int64_t, int64_t, int64_t);

}  // namespace conv2d_paths

namespace {

using namespace conv2d_paths;

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

// fp32, and half data widened to fp32: Winograd where it pays (conv2d_winograd.cpp; for bf16 results
// F(4x4) where its error fits, conv2d_winograd4.h), else im2col + packed GEMM (conv2d_packed.cpp).
template <typename T>
void forward_fp32(const Conv2dArgs& a, const ConvGeom& g, const float* w, const float* bias) {
  if (!use_winograd(g)) return forward_packed<T>(a, g, w, bias);
  if constexpr (!std::is_same_v<T, float>) {  // bf16 results: F(4x4) where its error fits
    if (conv2d_winograd4::takes(a.output.dtype, g.c, g.o)) {
      return conv2d_winograd4::conv(a.input.as<T>(), g.n, g.c, g.h, g.w, w, g.o, false, bias, a.output.as<T>());
    }
  }
  forward_winograd<T>(a, g, w, bias);
}

template <typename T>
void backward_data_fp32(const Conv2dArgs& a, const ConvGeom& g, const float* w) {
  if (!use_winograd(g)) return backward_data_packed<T>(a, g, w);
  if constexpr (!std::is_same_v<T, float>) {
    if (conv2d_winograd4::takes(a.input.dtype, g.o, g.c)) {
      return conv2d_winograd4::conv(a.output.as<T>(), g.n, g.o, g.oh, g.ow, w, g.c, true, nullptr, a.input.as<T>());
    }
  }
  backward_data_winograd<T>(a, g, w);
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
  if constexpr (std::is_same_v<Acc, float>) return forward_fp32<T>(a, g, w.data(), bias);
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
  if constexpr (std::is_same_v<Acc, float>) return backward_data_fp32<T>(a, g, w.data());
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

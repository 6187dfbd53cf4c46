// winograd_error: how far fp32 Winograd convolutions land from the exact result, against the bound
// the convolution tests hold every fp32 path to (tests/support/tolerance.h, accumulated(F32, 9 K):
// 1e-5 relative + 1e-6 sqrt(9 K) absolute). Why the CPU backend runs F(2x2, 3x3) and not the 1.78x
// cheaper F(4x4, 3x3): docs/BENCHMARKS.md, "Design notes".
//
// One tile of outputs over K input channels, inputs and filters uniform in [-1, 1] (as the tests'):
// U = G g G^T in double rounded once to fp32 (as winograd.h does), V = B^T d B and the products
// summed over channels in fp32 (one fused multiply-add per channel, as the GEMM tile), Y = A^T M A
// in fp32; the reference is the direct convolution in double. Prints, per transform and K, the rms
// and largest error and the largest error over its bound (above 1 fails the tests); and the same
// against what a half-precision result (autocast's fp16 and bf16 convolutions, fp32 inside) leaves
// for the computation: accumulated(F16 or BF16, 9 K) is eps |y| + 1e-6 sqrt(9 K), of which rounding
// y into the dtype takes up to eps / 2 |y|.
// F(4x4, 3x3) with the points 0, +-1, +-2 (Lavin & Gray's), 0, -1, 1, 1/2, -2 (Barabasz et al.,
// "Error analysis and improving the accuracy of Winograd convolution", 2020; the CPU backend's bf16
// F(4x4), conv2d_winograd4.h) and 0, +-1, +-1/2; F(3x3, 3x3) with 0, +-1 and one of 1/2, 2, -1/2.
// 4000 tiles of 9 or 16 outputs per K for these (at 1000, the largest bf16 error at K = 256 read
// 0.74 where 4000 give 1.03).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// A transform F(m x m, 3x3): A^T (m x n), G (n x 3), B^T (n x n), n = m + 2.
struct Transform {
  const char* name;
  int m;
  std::vector<double> at, g, bt;
};

const Transform kTransforms[] = {
    {"F(2x2) 0 +-1",
     2,
     {1, 1, 1, 0, 0, 1, -1, -1},
     {1, 0, 0, .5, .5, .5, .5, -.5, .5, 0, 0, 1},
     {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1}},
    {"F(4x4) 0 +-1 +-2",
     4,
     {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1},
     {1. / 4, 0, 0, -1. / 6, -1. / 6, -1. / 6, -1. / 6, 1. / 6, -1. / 6, 1. / 24, 1. / 12, 1. / 6, 1. / 24, -1. / 12,
      1. / 6, 0, 0, 1},
     {4, 0, -5, 0, 1, 0, 0, -4, -4, 1, 1, 0, 0, 4, -4, -1, 1, 0, 0, -2, -1, 2, 1, 0, 0, 2, -1, -2, 1, 0, 0, 4, 0, -5, 0, 1}},
    {"F(4x4) 0 -1 1 1/2 -2",
     4,
     {1, 1, 1, 1, 1, 0, 0, -1, 1, .5, -2, 0, 0, 1, 1, .25, 4, 0, 0, -1, 1, .125, -8, 1},
     {1, 0, 0, -1. / 3, 1. / 3, -1. / 3, 1. / 3, 1. / 3, 1. / 3, -16. / 15, -8. / 15, -4. / 15, 1. / 15, -2. / 15,
      4. / 15, 0, 0, 1},
     {1, -1.5, -2, 1.5, 1, 0, 0, 1, -2.5, .5, 1, 0, 0, -1, .5, 2.5, 1, 0, 0, -2, -1, 2, 1, 0, 0, .5, -1, -.5, 1, 0,
      0, 1, -1.5, -2, 1.5, 1}},
    {"F(3x3) 0 +-1 1/2",
     3,
     {1, 1, 1, 1, 0, 0, 1, -1, .5, 0, 0, 1, 1, .25, 1},
     {2, 0, 0, 1, 1, 1, -1. / 3, 1. / 3, -1. / 3, -8. / 3, -4. / 3, -2. / 3, 0, 0, 1},
     {.5, -1, -.5, 1, 0, 0, -.5, .5, 1, 0, 0, .5, -1.5, 1, 0, 0, -1, 0, 1, 0, 0, .5, -1, -.5, 1}},
    {"F(3x3) 0 +-1 2",
     3,
     {1, 1, 1, 1, 0, 0, 1, -1, 2, 0, 0, 1, 1, 4, 1},
     {.5, 0, 0, -.5, -.5, -.5, -1. / 6, 1. / 6, -1. / 6, 1. / 6, 1. / 3, 2. / 3, 0, 0, 1},
     {2, -1, -2, 1, 0, 0, -2, -1, 1, 0, 0, 2, -3, 1, 0, 0, -1, 0, 1, 0, 0, 2, -1, -2, 1}},
    {"F(3x3) 0 +-1 -1/2",
     3,
     {1, 1, 1, 1, 0, 0, 1, -1, -.5, 0, 0, 1, 1, .25, 1},
     {-2, 0, 0, 1. / 3, 1. / 3, 1. / 3, -1, 1, -1, 8. / 3, -4. / 3, 2. / 3, 0, 0, 1},
     {-.5, -1, .5, 1, 0, 0, .5, 1.5, 1, 0, 0, -.5, -.5, 1, 0, 0, -1, 0, 1, 0, 0, -.5, -1, .5, 1}},
    {"F(4x4) 0 +-1 +-1/2",
     4,
     {1, 1, 1, 1, 1, 0, 0, 1, -1, .5, -.5, 0, 0, 1, 1, .25, .25, 0, 0, 1, -1, .125, -.125, 1},
     {4, 0, 0, 2. / 3, 2. / 3, 2. / 3, 2. / 3, -2. / 3, 2. / 3, -8. / 3, -4. / 3, -2. / 3, -8. / 3, 4. / 3, -2. / 3,
      0, 0, 1},
     {.25, 0, -1.25, 0, 1, 0, 0, -.25, -.25, 1, 1, 0, 0, .25, -.25, -1, 1, 0, 0, -.5, -1, .5, 1, 0, 0, .5, -1, -.5, 1,
      0, 0, .25, 0, -1.25, 0, 1}},
};

struct Result {
  double rms, max_error, max_ratio, max_ratio_f16, max_ratio_bf16;
};

Result measure(const Transform& t, int channels, int tiles, std::mt19937& rng) {
  const int m = t.m, n = m + 2;
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  double sum_sq = 0.0, max_error = 0.0, max_ratio = 0.0, max_ratio_f16 = 0.0, max_ratio_bf16 = 0.0;
  std::vector<float> d(channels * n * n), g(channels * 9), v(n * n), u(n * n), acc(n * n);
  std::vector<double> gg(n * 3);
  std::vector<float> tmp(n * n), am(m * n);
  for (int tile = 0; tile < tiles; ++tile) {
    for (float& x : d) x = static_cast<float>(uniform(rng));
    for (float& x : g) x = static_cast<float>(uniform(rng));
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int c = 0; c < channels; ++c) {
      const float* dc = &d[c * n * n];
      const float* gc = &g[c * 9];
      for (int i = 0; i < n; ++i)  // G g, then (G g) G^T, in double, rounded once
        for (int k = 0; k < 3; ++k) {
          double s = 0.0;
          for (int l = 0; l < 3; ++l) s += t.g[i * 3 + l] * gc[l * 3 + k];
          gg[i * 3 + k] = s;
        }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0.0;
          for (int l = 0; l < 3; ++l) s += gg[i * 3 + l] * t.g[j * 3 + l];
          u[i * n + j] = static_cast<float>(s);
        }
      for (int i = 0; i < n; ++i)  // B^T d, then (B^T d) B, in fp32
        for (int j = 0; j < n; ++j) {
          float s = 0.0f;
          for (int l = 0; l < n; ++l) s += static_cast<float>(t.bt[i * n + l]) * dc[l * n + j];
          tmp[i * n + j] = s;
        }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          float s = 0.0f;
          for (int l = 0; l < n; ++l) s += tmp[i * n + l] * static_cast<float>(t.bt[j * n + l]);
          v[i * n + j] = s;
        }
      for (int i = 0; i < n * n; ++i) acc[i] = std::fma(u[i], v[i], acc[i]);
    }
    for (int i = 0; i < m; ++i)  // A^T M, then (A^T M) A, in fp32
      for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int l = 0; l < n; ++l) s += static_cast<float>(t.at[i * n + l]) * acc[l * n + j];
        am[i * n + j] = s;
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        float y = 0.0f;
        for (int l = 0; l < n; ++l) y += am[i * n + l] * static_cast<float>(t.at[j * n + l]);
        double want = 0.0;
        for (int c = 0; c < channels; ++c)
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) want += double{d[c * n * n + (i + a) * n + j + b]} * g[c * 9 + a * 3 + b];
        const double error = std::fabs(y - want), atol = 1e-6 * std::sqrt(9.0 * channels);
        sum_sq += error * error;
        max_error = std::max(max_error, error);
        max_ratio = std::max(max_ratio, error / (1e-5 * std::fabs(want) + atol));
        max_ratio_f16 = std::max(max_ratio_f16, error / (0x1p-11 * std::fabs(want) + atol));  // eps / 2 = 2^-11
        max_ratio_bf16 = std::max(max_ratio_bf16, error / (0x1p-8 * std::fabs(want) + atol));
      }
  }
  return {std::sqrt(sum_sq / (double(tiles) * m * m)), max_error, max_ratio, max_ratio_f16, max_ratio_bf16};
}

}  // namespace

int main() {
  std::printf("fp32 Winograd error against the direct convolution in double, per output; bound = the tests'\n");
  std::printf("accumulated(F32, 9 K): 1e-5 |y| + 1e-6 sqrt(9 K); for an fp16 or bf16 result, what its rounding\n");
  std::printf("leaves of accumulated(F16 or BF16, 9 K): eps / 2 |y| + 1e-6 sqrt(9 K). Above 1 fails the tests.\n\n");
  std::printf("%-22s %5s %12s %12s %14s %14s %14s\n", "transform", "K", "rms error", "max error", "max / bound",
              "f16 result", "bf16 result");
  for (int channels : {16, 64, 256, 512}) {
    for (const Transform& t : kTransforms) {
      std::mt19937 rng(1);
      const Result r = measure(t, channels, t.m == 2 ? 3000 : 4000, rng);
      std::printf("%-22s %5d %12.2e %12.2e %14.3f %14.3f %14.3f\n", t.name, channels, r.rms, r.max_error, r.max_ratio,
                  r.max_ratio_f16, r.max_ratio_bf16);
    }
  }
  return 0;
}

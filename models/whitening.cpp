// Patch whitening: the second-moment matrix of every k x k patch (accumulated in double, never
// materialising the patches), its eigendecomposition by cyclic Jacobi rotations (d = 12 for
// airbench's 2 x 2 RGB patches: tiny, so the simplest robust method), and the scaled filters.
#include "models/whitening.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace demi::models {
namespace {

// Eigen-decomposition of the symmetric n x n matrix `a` (row major, destroyed): eigenvalues in
// `values`, eigenvector j in column j of `vectors` (row major).
void symmetric_eigen(std::vector<double>& a, int n, std::vector<double>& values, std::vector<double>& vectors) {
  vectors.assign(static_cast<size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i) vectors[static_cast<size_t>(i * n + i)] = 1.0;
  auto at = [&](std::vector<double>& m, int r, int c) -> double& { return m[static_cast<size_t>(r * n + c)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int p = 0; p < n; ++p) {
      diag += at(a, p, p) * at(a, p, p);
      for (int q = p + 1; q < n; ++q) off += at(a, p, q) * at(a, p, q);
    }
    if (off <= 1e-30 * diag) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = at(a, p, q);
        if (apq == 0.0) continue;
        // The rotation that zeroes a[p][q] (Golub & Van Loan, 8.5.2: the smaller of the two angles).
        const double theta = (at(a, q, q) - at(a, p, p)) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q of a
          const double akp = at(a, k, p), akq = at(a, k, q);
          at(a, k, p) = c * akp - s * akq;
          at(a, k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q of a
          const double apk = at(a, p, k), aqk = at(a, q, k);
          at(a, p, k) = c * apk - s * aqk;
          at(a, q, k) = s * apk + c * aqk;
        }
        for (int k = 0; k < n; ++k) {
          const double vkp = at(vectors, k, p), vkq = at(vectors, k, q);
          at(vectors, k, p) = c * vkp - s * vkq;
          at(vectors, k, q) = s * vkp + c * vkq;
        }
      }
    }
  }
  values.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) values[static_cast<size_t>(i)] = at(a, i, i);
}

}  // namespace

Tensor patch_whitening_weights(const Tensor& images, int k, double eps) {
  DEMI_CHECK(images.defined() && images.dim() == 4 && images.dtype() == DType::F32 && images.device() == Device::cpu(),
             "patch_whitening_weights: expects float32 [N, C, H, W] images on the CPU, got ",
             images.defined() ? images.shape() : Shape{});
  DEMI_CHECK(k >= 1 && k <= images.size(2) && k <= images.size(3), "patch_whitening_weights: kernel_size ", k,
             " does not fit ", images.size(2), "x", images.size(3), " images");
  DEMI_CHECK(eps > 0.0, "patch_whitening_weights: eps must be > 0 (it bounds the gain of flat directions), got ", eps);
  const float* px = images.data<float>();
  const int64_t n = images.size(0), channels = images.size(1), h = images.size(2), w = images.size(3);
  const int d = static_cast<int>(channels * k * k);
  // E[p p^T] over every patch position of every image; p's index is (c, dy, dx), the weight layout.
  std::vector<double> moment(static_cast<size_t>(d * d), 0.0), patch(static_cast<size_t>(d));
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t y = 0; y + k <= h; ++y) {
      for (int64_t xx = 0; xx + k <= w; ++xx) {
        size_t j = 0;
        for (int64_t c = 0; c < channels; ++c)
          for (int dy = 0; dy < k; ++dy)
            for (int dx = 0; dx < k; ++dx) patch[j++] = px[((i * channels + c) * h + y + dy) * w + xx + dx];
        for (int r = 0; r < d; ++r)
          for (int q = r; q < d; ++q) moment[static_cast<size_t>(r * d + q)] += patch[r] * patch[q];
        ++count;
      }
    }
  }
  DEMI_CHECK(count > 0, "patch_whitening_weights: no images");
  for (int r = 0; r < d; ++r)
    for (int q = r; q < d; ++q) {
      moment[static_cast<size_t>(r * d + q)] /= static_cast<double>(count);
      moment[static_cast<size_t>(q * d + r)] = moment[static_cast<size_t>(r * d + q)];
    }
  std::vector<double> values, vectors;
  symmetric_eigen(moment, d, values, vectors);
  std::vector<int> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return values[static_cast<size_t>(a)] > values[static_cast<size_t>(b)]; });
  std::vector<float> weights(static_cast<size_t>(2 * d * d));
  for (int f = 0; f < d; ++f) {
    const int e = order[static_cast<size_t>(f)];
    const double gain = 1.0 / std::sqrt(std::max(0.0, values[static_cast<size_t>(e)]) + eps);
    for (int j = 0; j < d; ++j) {
      const float v = static_cast<float>(vectors[static_cast<size_t>(j * d + e)] * gain);
      weights[static_cast<size_t>(f * d + j)] = v;
      weights[static_cast<size_t>((f + d) * d + j)] = -v;
    }
  }
  return tensor(weights, {2 * d, channels, k, k});
}

}  // namespace demi::models

// Patch whitening: on the patches it was computed from, the filters give decorrelated unit-variance
// outputs (checked by convolving, so the weight layout is pinned too), largest eigenvalue first,
// the second half negated; and AirNet's recipe options.
#include <gtest/gtest.h>

#include <cmath>

#include "models/airnet.h"
#include "models/whitening.h"

namespace demi {
namespace {

// Images whose channels and neighbouring pixels are strongly correlated (as natural images are).
Tensor correlated_images(int64_t n) {
  Generator gen(7);
  const Tensor noise = randn({n, 3, 8, 8}, gen);
  std::vector<float> v = noise.to_vector<float>(), out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) {
        auto at = [&](int64_t c, int64_t yy, int64_t xx) { return v[static_cast<size_t>(((i * 3 + c) * 8 + yy) * 8 + xx)]; };
        const float shared = at(0, y, x) + (x > 0 ? at(0, y, x - 1) : 0.0f);
        for (int64_t c = 0; c < 3; ++c) out[static_cast<size_t>(((i * 3 + c) * 8 + y) * 8 + x)] = 2.0f * shared + 0.3f * at(c, y, x);
      }
  return tensor(out, {n, 3, 8, 8});
}

TEST(Whitening, FiltersDecorrelateThePatches) {
  const Tensor images = correlated_images(200);
  const Tensor w = models::patch_whitening_weights(images, 2, 1e-9);
  ASSERT_EQ(w.shape(), (Shape{24, 3, 2, 2}));
  // Outputs [N, 24, 7, 7]: the second moment of the first 12 channels over all positions is ~I.
  const std::vector<float> y = conv2d(images, w).to_vector<float>();
  const int64_t positions = 200 * 49;
  for (int a = 0; a < 12; ++a)
    for (int b = 0; b < 12; ++b) {
      double m = 0.0;
      for (int64_t i = 0; i < 200; ++i)
        for (int64_t p = 0; p < 49; ++p)
          m += static_cast<double>(y[static_cast<size_t>((i * 24 + a) * 49 + p)]) * y[static_cast<size_t>((i * 24 + b) * 49 + p)];
      EXPECT_NEAR(m / static_cast<double>(positions), a == b ? 1.0 : 0.0, 1e-3) << a << ", " << b;
    }
  const std::vector<float> wv = w.to_vector<float>();
  for (size_t k = 0; k < 144; ++k) EXPECT_EQ(wv[k + 144], -wv[k]) << k;
  // Largest eigenvalue first: its filter has the smallest gain.
  double first = 0.0, last = 0.0;
  for (size_t k = 0; k < 12; ++k) {
    first += wv[k] * wv[k];
    last += wv[132 + k] * wv[132 + k];
  }
  EXPECT_LT(first, last);
}

TEST(Whitening, EpsBoundsTheGainOfFlatDirections) {
  // Constant images: every direction but one has eigenvalue 0, so its gain is 1 / sqrt(eps).
  const Tensor flat = full({4, 1, 4, 4}, 1.0);
  const std::vector<float> w = models::patch_whitening_weights(flat, 2, 0.01).to_vector<float>();
  double largest = 0.0;
  for (float v : w) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  EXPECT_LE(largest, 10.0 + 1e-4);
  EXPECT_TRUE(std::isfinite(largest));
  EXPECT_THROW(models::patch_whitening_weights(flat, 2, 0.0), Error);
  EXPECT_THROW(models::patch_whitening_weights(flat, 5, 0.01), Error);
  EXPECT_THROW(models::patch_whitening_weights(flat.to(DType::F16), 2, 0.01), Error);
}

TEST(AirNetOptions, RecipeOptionsReachTheLayers) {
  models::AirNetOptions o;
  o.batch_norm_eps = 1e-12;
  o.batch_norm_momentum = 0.4;
  o.dirac_init = true;
  models::AirNet net(default_generator(), o);
  int batch_norms = 0;
  net.apply([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
      EXPECT_EQ(bn->options().eps, 1e-12);
      EXPECT_EQ(bn->options().momentum, 0.4);
      ++batch_norms;
    }
  });
  EXPECT_EQ(batch_norms, 6);
  // blocks.0.conv1 is the first 3x3 conv (24 -> 64): filter 5 is the identity on channel 5.
  const std::vector<float> w = net.state_dict().at("blocks.0.conv1.weight").to_vector<float>();
  for (int64_t c = 0; c < 24; ++c)
    for (int64_t t = 0; t < 9; ++t) EXPECT_EQ(w[static_cast<size_t>((5 * 24 + c) * 9 + t)], c == 5 && t == 4 ? 1.0f : 0.0f);
  EXPECT_EQ(net.stem().weight.shape(), (Shape{24, 3, 2, 2}));
}

}  // namespace
}  // namespace demi

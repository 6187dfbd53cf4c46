// The moment checks of the random kernels' tests (CPU and CUDA alike): a sample's mean and variance
// within three standard errors of its distribution's, and a uniform sample inside its range.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace demi::test {

// z drawn from Normal(mean, stddev): its mean and (unbiased) variance within 3 sigma.
inline void expect_normal_moments(const std::vector<double>& z, double mean, double stddev) {
  const int64_t n = static_cast<int64_t>(z.size());
  double sample_mean = 0, var = 0;
  for (double v : z) sample_mean += v;
  sample_mean /= n;
  for (double v : z) var += (v - sample_mean) * (v - sample_mean);
  var /= n - 1;
  EXPECT_NEAR(sample_mean, mean, 3 * stddev / std::sqrt(n));
  EXPECT_NEAR(var, stddev * stddev, 3 * (stddev * stddev) * std::sqrt(2.0 / n));
}

// u drawn from Uniform[a, b): its mean within 3 sigma, every draw in [a, b).
inline void expect_uniform_moments(const std::vector<double>& u, double a, double b) {
  const int64_t n = static_cast<int64_t>(u.size());
  double sample_mean = 0;
  for (double v : u) sample_mean += v;
  sample_mean /= n;
  EXPECT_NEAR(sample_mean, (a + b) / 2, 3 * ((b - a) / std::sqrt(12.0)) / std::sqrt(n));
  EXPECT_GE(*std::min_element(u.begin(), u.end()), a);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), b);
}

}  // namespace demi::test

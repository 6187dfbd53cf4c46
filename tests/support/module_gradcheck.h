// Gradients of a float64 computation against central finite differences, for module tests: the
// inputs and parameters a layer's backward must get right, checked as test_gradcheck.cpp checks
// the ops.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/tensor/factories.h"

namespace demi::test {

// The largest |analytic - numeric| over every element of every tensor of `wrt` (float64 leaves that
// require grad), relative to the largest |numeric|, for the loss sum(w * f()) with a fixed random w.
inline double max_gradient_error(const std::function<Tensor()>& f, const std::vector<Tensor>& wrt, Generator& gen) {
  for (const Tensor& t : wrt) t.set_grad(Tensor());
  const Tensor y = f();
  const Tensor w = randn(y.shape(), gen, DType::F64);
  sum(y * w).backward();
  auto loss = [&] {
    NoGradGuard no_grad;
    return sum(f() * w).item();
  };
  const double h = 1e-6;
  double max_err = 0.0, max_ref = 0.0;
  for (const Tensor& t : wrt) {
    const std::vector<double> analytic = t.grad().to_vector<double>();
    double* x = t.data<double>();
    for (size_t j = 0; j < analytic.size(); ++j) {
      const double saved = x[j];
      x[j] = saved + h;
      const double plus = loss();
      x[j] = saved - h;
      const double minus = loss();
      x[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      max_err = std::max(max_err, std::abs(numeric - analytic[j]));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
  }
  return max_err / std::max(max_ref, 1e-12);
}

}  // namespace demi::test

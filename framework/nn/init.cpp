// Default initialisation: kaiming_uniform_(a = sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#include "framework/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/tensor/factories.h"

namespace demi::nn::init {

void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen) {
  DEMI_CHECK(fan_in > 0, "init: fan_in must be positive, got ", fan_in);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  uniform_(t, -bound, bound, gen);
}

void dirac_(const Tensor& weight) {
  DEMI_CHECK(weight.dim() == 4 && weight.size(2) == weight.size(3), "init::dirac_: expects a [out, in, k, k] weight, got ",
             weight.shape());
  const int64_t out = weight.size(0), in = weight.size(1), k = weight.size(2);
  std::vector<float> w(static_cast<size_t>(weight.numel()), 0.0f);
  for (int64_t i = 0; i < std::min(out, in); ++i) w[static_cast<size_t>(((i * in + i) * k + k / 2) * k + k / 2)] = 1.0f;
  const Tensor identity = tensor(w, weight.shape()).to(weight.device()).to(weight.dtype());
  NoGradGuard no_grad;  // initialisers write parameters
  weight.copy_(identity);
}

}  // namespace demi::nn::init

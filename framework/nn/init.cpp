// Default initialisation (kaiming_uniform_(a = sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
// and torch.nn.init's xavier_uniform_, kaiming_normal_ and trunc_normal_.
#include "framework/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
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

void xavier_uniform_(const Tensor& weight, Generator& gen, double gain) {
  DEMI_CHECK(weight.dim() == 2, "init::xavier_uniform_: expects a 2-D [fan_out, fan_in] weight, got ", weight.shape());
  const double fans = static_cast<double>(weight.size(0) + weight.size(1));
  DEMI_CHECK(fans > 0, "init::xavier_uniform_: the weight ", weight.shape(), " is empty");
  const double bound = gain * std::sqrt(6.0 / fans);
  uniform_(weight, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& weight, Generator& gen) {
  DEMI_CHECK(weight.dim() >= 2, "init::kaiming_normal_: expects a weight of at least 2 dims, got ", weight.shape());
  const int64_t fan_in = weight.numel() / weight.size(0);
  DEMI_CHECK(fan_in > 0, "init::kaiming_normal_: the weight ", weight.shape(), " is empty");
  NoGradGuard no_grad;
  weight.copy_(randn(weight.shape(), gen) * std::sqrt(2.0 / static_cast<double>(fan_in)));
}

void trunc_normal_(const Tensor& t, Generator& gen, double std, double mean, double a, double b) {
  DEMI_CHECK(std > 0 && a < b && a <= mean && mean <= b, "init::trunc_normal_: needs std > 0 and a <= mean <= b, "
             "got std ", std, ", mean ", mean, ", [", a, ", ", b, "]");
  std::vector<double> v = randn(t.shape(), gen, DType::F64).to_vector<double>();
  for (double& e : v) {
    e = mean + std * e;
    while (e < a || e > b) e = mean + std * randn({}, gen, DType::F64).item();
  }
  NoGradGuard no_grad;  // initialisers write parameters
  t.copy_(tensor(v, t.shape()).to(t.device()));
}

}  // namespace demi::nn::init

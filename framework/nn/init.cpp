// Default initialisation: kaiming_uniform_(a = sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#include "framework/nn/init.h"

#include <cmath>

#include "framework/tensor/factories.h"

namespace demi::nn::init {

void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen) {
  DEMI_CHECK(fan_in > 0, "init: fan_in must be positive, got ", fan_in);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  uniform_(t, -bound, bound, gen);
}

}  // namespace demi::nn::init

// One AdamW step (torch.optim.AdamW) on one parameter, fused into a single pass: fp32 moments and
// math (double for F64 params); with an fp32 master the step lands on the master and param
// receives it rounded once.
#include <cmath>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T, typename G, bool kMaster>
void adamw_typed(const AdamWArgs& args, int64_t step) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  T* param = args.param.as<T>();
  const G* grad = args.grad.as<G>();
  C* m = args.exp_avg.as<C>();
  C* v = args.exp_avg_sq.as<C>();
  float* master = args.master.as<float>();
  const double bias1 = 1.0 - std::pow(args.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(args.beta2, static_cast<double>(step));
  const C decay = static_cast<C>(1.0 - args.lr * args.weight_decay);
  const C step_size = static_cast<C>(args.lr / bias1);
  const C inv_sqrt_bias2 = static_cast<C>(1.0 / std::sqrt(bias2));
  // 1 - beta in double, then rounded: float(0.9) subtracted from 1 in float is 2.4e-7 off, and the
  // bias correction (in double) would not cancel that error.
  const C beta1 = static_cast<C>(args.beta1), beta2 = static_cast<C>(args.beta2), eps = static_cast<C>(args.eps);
  const C one_minus_beta1 = static_cast<C>(1.0 - args.beta1), one_minus_beta2 = static_cast<C>(1.0 - args.beta2);
  parallel_for(args.param.numel(), 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const C g = static_cast<C>(static_cast<acc_t<G>>(grad[i]));
      C p = (kMaster ? static_cast<C>(master[i]) : static_cast<C>(param[i])) * decay;
      m[i] = beta1 * m[i] + one_minus_beta1 * g;
      v[i] = beta2 * v[i] + one_minus_beta2 * g * g;
      p -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bias2 + eps);
      if constexpr (kMaster) master[i] = static_cast<float>(p);
      store_param(param, i, p, args.rounding);
    }
  });
}

}  // namespace

void CpuKernels::adamw_step_impl(const AdamWArgs& given) {
  constexpr const char* op = "adamw_step";
  if (found_inf_set(given.found_inf)) return;  // a skipped step changes nothing, its count included
  const AdamWArgs args = with_host_lr(given);
  int64_t step = args.step;
  if (args.step_count.defined()) step = ++*args.step_count.as<int64_t>();
  const TensorRef& param = args.param;
  const bool has_master = args.master.defined();
  dispatch_floating(param.dtype, op, [&](auto ptag) {
    dispatch_floating(args.grad.dtype, op, [&](auto gtag) {
      using T = decltype(ptag);
      using G = decltype(gtag);
      if (has_master) adamw_typed<T, G, true>(args, step);
      else adamw_typed<T, G, false>(args, step);
    });
  });
}

}  // namespace demi::backend::cpu

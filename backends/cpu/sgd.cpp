// One SGD step (PyTorch's torch.optim.SGD: weight decay, momentum, dampening, nesterov) on one
// parameter, fused into a single pass. The math is fp32 (double for F64 params); with an fp32
// master copy the step lands on the master and param receives it rounded once.
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

template <typename T, typename G, bool kMaster>
void sgd_typed(const SgdArgs& args) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  T* param = args.param.as<T>();
  const G* grad = args.grad.as<G>();
  C* buf = args.momentum_buffer.as<C>();
  float* master = args.master.as<float>();
  const C lr = static_cast<C>(args.lr), momentum = static_cast<C>(args.momentum);
  const C dampening = static_cast<C>(args.dampening), weight_decay = static_cast<C>(args.weight_decay);
  const bool use_momentum = args.momentum != 0.0, nesterov = args.nesterov, first = args.first_step;
  parallel_for(args.param.numel(), 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      C p = kMaster ? static_cast<C>(master[i]) : static_cast<C>(param[i]);
      C g = static_cast<C>(static_cast<acc_t<G>>(grad[i])) + weight_decay * p;
      if (use_momentum) {
        const C v = first ? g : momentum * buf[i] + (C(1) - dampening) * g;
        buf[i] = v;
        g = nesterov ? g + momentum * v : v;
      }
      p -= lr * g;
      if constexpr (kMaster) master[i] = static_cast<float>(p);
      store_param(param, i, p, args.rounding);
    }
  });
}

}  // namespace

void CpuKernels::sgd_step_impl(const SgdArgs& given) {
  constexpr const char* op = "sgd_step";
  if (found_inf_set(given.found_inf)) return;  // a skipped step changes nothing
  const SgdArgs args = with_host_lr(given);
  const TensorRef& param = args.param;
  const TensorRef& grad = args.grad;
  const bool has_master = args.master.defined();
  dispatch_floating(param.dtype, op, [&](auto ptag) {
    dispatch_floating(grad.dtype, op, [&](auto gtag) {
      using T = decltype(ptag);
      using G = decltype(gtag);
      if (has_master) sgd_typed<T, G, true>(args);
      else sgd_typed<T, G, false>(args);
    });
  });
}

}  // namespace demi::backend::cpu

// The GradScaler kernels on the CPU: one pass per gradient that unscales and detects inf/NaN
// (fp32 math, one rounding on store, for fp32, fp16 and bf16 gradients alike), and the scale update.
#include <atomic>
#include <cmath>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// out = in * inv_scale; returns whether `in` holds an inf or NaN.
template <typename In, typename Out>
bool unscale_one(const TensorRef& in, const TensorRef& out, float inv_scale) {
  const In* x = in.as<In>();
  Out* y = out.as<Out>();
  std::atomic<bool> non_finite{false};
  parallel_for(in.numel(), 2, [&](int64_t begin, int64_t end) {
    bool local = false;
    for (int64_t i = begin; i < end; ++i) {
      const float v = static_cast<float>(x[i]);
      local |= !std::isfinite(v);
      y[i] = static_cast<Out>(v * inv_scale);
    }
    if (local) non_finite.store(true, std::memory_order_relaxed);
  });
  return non_finite.load();
}

}  // namespace

void CpuKernels::unscale_check_finite_impl(const UnscaleArgs& args) {
  const float inv_scale = *args.inv_scale.as<float>();
  bool found = false;
  for (size_t i = 0; i < args.in.size(); ++i) {
    const TensorRef& in = args.in[i];
    const TensorRef& out = args.out[i];
    dispatch_floating(in.dtype, "unscale_check_finite", [&](auto in_tag) {
      using In = decltype(in_tag);
      if (out.dtype == in.dtype) {
        found |= unscale_one<In, In>(in, out, inv_scale);
      } else {
        found |= unscale_one<In, float>(in, out, inv_scale);
      }
    });
  }
  if (found) *args.found_inf.as<float>() = 1.0f;
}

void CpuKernels::update_scale_impl(const ScaleUpdateArgs& args) {
  float& scale = *args.scale.as<float>();
  int64_t& tracker = *args.growth_tracker.as<int64_t>();
  const bool skipped = *args.found_inf.as<float>() != 0.0f;
  if (args.step_counts.defined()) {
    int64_t* counts = args.step_counts.as<int64_t>();
    counts[skipped ? 1 : 0] += 1;
    counts[2] = skipped ? counts[2] + 1 : 0;
  }
  if (skipped) {
    scale = static_cast<float>(scale * args.backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t successful = tracker + 1;
  if (successful >= args.growth_interval) {
    const float grown = static_cast<float>(scale * args.growth_factor);
    if (std::isfinite(grown)) scale = grown;  // never grow into inf
    tracker = 0;
  } else {
    tracker = successful;
  }
}

}  // namespace demi::backend::cpu

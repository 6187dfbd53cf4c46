// Dropout on the CPU: element i of the mask comes from Philox counter offset + i, the draw the
// `random` kernel makes for element i of a float32 output (backends/philox.h), so the backward
// regenerates the forward's mask and the CUDA kernel draws the same one. Portable C++: the Philox
// rounds vectorise at every ISA level.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/philox_block.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// y = x * (kept ? 1 / keep : 0) in C (fp32 for half types), rounded once to T.
template <typename T>
void dropout_typed(const DropoutArgs& args, const DropoutMask& mask) {
  using C = acc_t<T>;
  const T* x = args.input.as<T>();
  T* y = args.output.as<T>();
  const int64_t n = args.input.numel();
  const C scale = mask.keep > 0.0 ? C(1) / static_cast<C>(mask.keep) : C(0);  // unused when nothing is kept
  const uint32_t keep_below = mask.keep_below;
  const uint64_t seed = args.seed, offset = args.offset;
  parallel_for(n, 20, [&](int64_t begin, int64_t end) {
    PhiloxBlock r;
    for (int64_t s = begin; s < end; s += kPhiloxLanes) {
      philox4x32_10(offset + static_cast<uint64_t>(s), seed, r);
      const int len = static_cast<int>(std::min<int64_t>(kPhiloxLanes, end - s));
      for (int j = 0; j < len; ++j) {
        const C m = (r.x0[j] >> 8) < keep_below ? scale : C(0);
        y[s + j] = static_cast<T>(static_cast<C>(x[s + j]) * m);
      }
    }
  });
}

}  // namespace

void CpuKernels::dropout_impl(const DropoutArgs& args, const DropoutMask& mask) {
  dispatch_floating(args.input.dtype, "dropout", [&](auto tag) { dropout_typed<decltype(tag)>(args, mask); });
}

}  // namespace demi::backend::cpu

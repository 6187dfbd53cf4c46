// Counter-based random numbers on the CPU: Philox-4x32-10, uniform and normal (Box-Muller), from the
// functions of backends/philox.h (which documents the exact mapping), shared with the CUDA kernels so
// that both devices draw the same numbers. Element i depends only on (seed, offset, i).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/philox_block.h"
#include "backends/kernel_checks.h"
#include "backends/philox.h"

namespace demi::backend::cpu {
namespace {

// The next T below v, for the rare uniform draw that rounds up to b (or, for a huge b, to inf).
template <typename T>
T below(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {
    return Eigen::numext::bit_cast<T>(philox::bits_below<uint16_t>(Eigen::numext::bit_cast<uint16_t>(v)));
  }
}

template <typename T>
void random_typed(const RandomArgs& args) {
  T* out = args.output.as<T>();
  const int64_t n = args.output.numel();
  const double a = args.a, b = args.b;
  const uint64_t seed = args.seed, offset = args.offset;
  constexpr bool kWide = std::is_same_v<T, double>;
  const bool uniform = args.kind == RandomKind::Uniform;
  const bool empty = !(a < b);  // uniform with a == b: every draw is a
  parallel_for(n, uniform ? 20 : 40, [&](int64_t begin, int64_t end) {
    PhiloxBlock r;
    for (int64_t s = begin; s < end; s += kPhiloxLanes) {
      philox4x32_10(offset + static_cast<uint64_t>(s), seed, r);
      const int len = static_cast<int>(std::min<int64_t>(kPhiloxLanes, end - s));
      T* o = out + s;
      if (uniform) {
        for (int j = 0; j < len; ++j) {
          T v = round_to<T>(philox::uniform(r.x0[j], r.x1[j], kWide, a, b));
          if (!empty && static_cast<double>(static_cast<acc_t<T>>(v)) >= b) v = below(v);
          o[j] = v;
        }
      } else {
        for (int j = 0; j < len; ++j)
          o[j] = round_to<T>(philox::normal(r.x0[j], r.x1[j], r.x2[j], r.x3[j], kWide, a, b));
      }
    }
  });
}

}  // namespace

void CpuKernels::random_impl(const RandomArgs& args) {
  dispatch_floating(args.output.dtype, "random", [&](auto tag) { random_typed<decltype(tag)>(args); });
}

}  // namespace demi::backend::cpu

// where: y = cond ? a : b with cond, a and b broadcast to y's shape. A select of each element's bits
// (any dtype: only its width matters), never arithmetic, so inf and NaN in the branch not taken do
// not reach y, and -0 and NaN payloads are kept.
#include <array>
#include <cstdint>

#include "backends/cpu/broadcast.h"
#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// One row: each operand steps by 0 (broadcast) or 1. The all-contiguous case is a plain loop the
// compiler vectorises as a blend.
template <typename Bits>
void where_row(const uint8_t* c, int64_t sc, const Bits* a, int64_t sa, const Bits* b, int64_t sb, Bits* y,
               int64_t n) {
  if (sc == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
  } else if (sc == 0) {  // one choice for the whole row
    const Bits* from = c[0] ? a : b;
    const int64_t step = c[0] ? sa : sb;
    for (int64_t i = 0; i < n; ++i) y[i] = from[i * step];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i * sa] : b[i * sb];
  }
}

template <typename Bits>
void where_typed(const BroadcastPlan<3>& p, const TensorRef& cond, const TensorRef& a, const TensorRef& b,
                 const TensorRef& y) {
  const uint8_t* pc = cond.as<const uint8_t>();
  const Bits* pa = a.as<const Bits>();
  const Bits* pb = b.as<const Bits>();
  Bits* py = y.as<Bits>();
  const int64_t sc = p.stride[0].back(), sa = p.stride[1].back(), sb = p.stride[2].back();
  parallel_for(y.numel(), 1, [&](int64_t begin, int64_t end) {
    for_each_row(p, begin, end, [&](const std::array<int64_t, 3>& at, int64_t pos, int64_t len) {
      where_row(pc + at[0], sc, pa + at[1], sa, pb + at[2], sb, py + pos, len);
    });
  });
}

}  // namespace

void CpuKernels::where_impl(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const BroadcastPlan<3> plan =
      plan_broadcast<3>("where", {"cond", "a", "b"}, {&cond.shape, &a.shape, &b.shape}, y.shape);
  if (y.numel() == 0) return;
  switch (dtype_size(y.dtype)) {
    case 1: return where_typed<uint8_t>(plan, cond, a, b, y);
    case 2: return where_typed<uint16_t>(plan, cond, a, b, y);
    case 4: return where_typed<uint32_t>(plan, cond, a, b, y);
    case 8: return where_typed<uint64_t>(plan, cond, a, b, y);
  }
  DEMI_THROW("where: no kernel for ", dtype_size(y.dtype), "-byte elements (", y.dtype, ")");
}

}  // namespace demi::backend::cpu

// permute: y = x with its dimensions reordered, for transpose and anything else that needs a
// materialised new layout (demi tensors are contiguous). Bytes are moved, so every dtype is one
// code path per element width.
#include <cstring>

#include "backends/cpu/common.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/kernel_checks.h"

namespace demi::backend::cpu {
namespace {

// Writes y row by row (its innermost dim), reading x through x's strides listed in y's dim order.
template <typename Word>
void permute_words(const Word* x, Word* y, const Shape& y_shape, const std::vector<int64_t>& x_strides) {
  const int rank = static_cast<int>(y_shape.size());
  const int64_t n = shape_numel(y_shape);
  const int64_t inner = rank ? y_shape[rank - 1] : 1, inner_stride = rank ? x_strides[rank - 1] : 0;
  parallel_for(n / inner, inner, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t src = 0, r = row;
      for (int d = rank - 2; d >= 0; --d) {
        src += (r % y_shape[d]) * x_strides[d];
        r /= y_shape[d];
      }
      Word* out = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) out[i] = x[src + i * inner_stride];
    }
  });
}

}  // namespace

void CpuKernels::permute_impl(const TensorRef& x, const TensorRef& y, const std::vector<int64_t>& dims) {
  if (y.numel() == 0) return;
  // x's element strides, then listed in y's dim order.
  const size_t rank = x.shape.size();
  std::vector<int64_t> stride(rank, 1), x_strides(rank, 0);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * x.shape[d];
  for (size_t i = 0; i < rank; ++i) x_strides[i] = stride[static_cast<size_t>(dims[i])];
  switch (dtype_size(x.dtype)) {
    case 1: return permute_words(x.as<uint8_t>(), y.as<uint8_t>(), y.shape, x_strides);
    case 2: return permute_words(x.as<uint16_t>(), y.as<uint16_t>(), y.shape, x_strides);
    case 4: return permute_words(x.as<uint32_t>(), y.as<uint32_t>(), y.shape, x_strides);
    case 8: return permute_words(x.as<uint64_t>(), y.as<uint64_t>(), y.shape, x_strides);
  }
  DEMI_THROW("permute: unsupported element size ", dtype_size(x.dtype));
}

}  // namespace demi::backend::cpu

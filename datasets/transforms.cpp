// Batch transforms for test-time augmentation (see transforms.h).
#include "datasets/transforms.h"

#include <cstdlib>

#include "framework/tensor/factories.h"

namespace demi::data {
namespace {

void check_batch(const Tensor& images, const char* what) {
  DEMI_CHECK(images.defined() && images.dim() == 4 && images.dtype() == DType::F32 && images.device() == Device::cpu(),
             what, ": expects a float32 [N, C, H, W] batch on the CPU, got ",
             images.defined() ? images.shape() : Shape{}, images.defined() ? "" : " (undefined)");
}

// Source index of coordinate i in [-(n - 1), 2n - 1): the row or column mirrored at the border.
int64_t reflect(int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); }

// out[n, c, y, x] = images[n, c, row(y), column(x)].
template <typename Row, typename Column>
Tensor remap(const Tensor& images, Row row, Column column) {
  Tensor out = empty(images.shape(), DType::F32);
  const int64_t planes = images.size(0) * images.size(1), h = images.size(2), w = images.size(3);
  const float* s = images.data<float>();  // tensors are contiguous (views included)
  float* d = out.data<float>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) d[(p * h + y) * w + x] = s[(p * h + row(y)) * w + column(x)];
  return out;
}

}  // namespace

Tensor mirror(const Tensor& images) {
  check_batch(images, "data::mirror");
  const int64_t w = images.size(3);
  return remap(images, [](int64_t y) { return y; }, [w](int64_t x) { return w - 1 - x; });
}

Tensor translate(const Tensor& images, int dy, int dx) {
  check_batch(images, "data::translate");
  const int64_t h = images.size(2), w = images.size(3);
  DEMI_CHECK(std::abs(dy) < h && std::abs(dx) < w, "data::translate: a shift of (", dy, ", ", dx,
             ") pixels reaches past the mirrored border of a ", h, "x", w, " image; use |shift| < its side");
  return remap(images, [=](int64_t y) { return reflect(y - dy, h); }, [=](int64_t x) { return reflect(x - dx, w); });
}

}  // namespace demi::data

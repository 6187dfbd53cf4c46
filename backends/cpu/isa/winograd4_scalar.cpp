// Plain C++ F(4x4, 3x3) column moves (isa.h's Winograd4): the oracle of the vector ones and the
// `scalar` level.
#include "backends/cpu/isa/isa.h"

namespace demi::backend::cpu::isa {
namespace {

void split_row(const float* line, int64_t tiles, float* views, int64_t stride) {
  for (int64_t j = 0; j < 6; ++j) {
    for (int64_t t = 0; t < tiles; ++t) views[j * stride + t] = line[4 * t + j];
  }
}

void interleave_row(const float* runs, int64_t stride, int64_t w, float bias, float* y) {
  for (int64_t x = 0; x < w; ++x) y[x] = runs[(x % 4) * stride + x / 4] + bias;
}

}  // namespace

extern const Winograd4 kWinograd4Scalar = {split_row, interleave_row};

}  // namespace demi::backend::cpu::isa

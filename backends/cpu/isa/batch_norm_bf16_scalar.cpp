// Batch norm's bf16 passes (isa.h, BatchNormBf16), plain C++ at the build's baseline: the oracle of the vector variants and the `scalar` level.
#include "backends/cpu/isa/batch_norm_bf16.h"

namespace demi::backend::cpu::isa {

extern const BatchNormBf16 kBatchNormBf16Scalar = DEMI_BATCH_NORM_BF16_TABLE;

}  // namespace demi::backend::cpu::isa

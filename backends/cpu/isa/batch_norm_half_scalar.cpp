// Batch norm's half passes (isa.h, BatchNormHalf) in plain C++ at the build's baseline, fp16 through
// the scalar conversions: the oracle of the vector variants and the `scalar` level.
#include "backends/cpu/isa/batch_norm_half.h"

namespace demi::backend::cpu::isa {

extern const BatchNormHalf kBatchNormBf16Scalar = batch_norm_half_table<Bf16Codec>(bn_normalize<Bf16Codec>);
extern const BatchNormHalf kBatchNormF16Scalar = batch_norm_half_table<ScalarF16Codec>(bn_normalize<ScalarF16Codec>);

}  // namespace demi::backend::cpu::isa

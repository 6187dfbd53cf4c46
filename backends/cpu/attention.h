// The CPU attention kernels' tile sizes and working memory (attention.cpp: forward,
// attention_backward.cpp), for the kernels and their tests. The kernels never hold more of the
// scores than one tile: a pass's scratch grows with L * E (backward's fp32 accumulator of grad_q),
// never with L * S. Their shared internals are attention_tiles.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/dtype.h"

namespace demi::backend::cpu::attention {

// Forward: tiles of kQueryRows queries against kKeyCols keys. Backward: kKeyRows keys (whose
// grad_k, grad_v rows stay in the tile's accumulators) against kQueryCols queries at a time.
constexpr int64_t kQueryRows = 64, kKeyCols = 128, kKeyRows = 64, kQueryCols = 128;

enum class Pass { Forward, Backward };
// The per-thread scratch bytes one pass takes for one head of these sizes (the tiles, widened
// operands, packing buffers; backward's grad_q accumulator of L x E): what the kernels carve from
// thread_scratch_bytes, exposed so that a test can hold it against L * S.
size_t scratch_bytes(Pass pass, DType dtype, int64_t L, int64_t S, int64_t E, int64_t Ev);
// Each pass's part (attention.cpp, attention_backward.cpp): neither grows with S.
size_t forward_scratch_bytes(DType dtype, int64_t E, int64_t Ev);
size_t backward_scratch_bytes(DType dtype, int64_t L, int64_t E, int64_t Ev);

}  // namespace demi::backend::cpu::attention

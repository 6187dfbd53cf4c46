// MemoryFormat: the order in which a 4-D tensor's elements sit in memory, as in PyTorch. The shape
// stays [N, C, H, W] either way; ChannelsLast stores it as [N, H, W, C] (NHWC), the layout
// tensor-core convolutions and most CPU convolution kernels want.
#pragma once

#include <ostream>

#include "framework/core/shape.h"

namespace demi {

enum class MemoryFormat : uint8_t {
  Contiguous,    // row-major in the shape's order (NCHW for 4-D tensors)
  ChannelsLast,  // 4-D only: NHWC
  Preserve,      // as an argument: keep the source's format
};

inline const char* memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::Contiguous: return "contiguous_format";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve_format";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& out, MemoryFormat f) { return out << memory_format_name(f); }

// True when NHWC and NCHW order the elements of `shape` differently: a 4-D shape whose channel
// count and spatial size both exceed 1. Otherwise the two formats are the same bytes, and demi
// calls such a tensor contiguous (PyTorch reports both formats for it).
inline bool channels_last_differs(const Shape& shape) {
  return shape.size() == 4 && shape[1] > 1 && shape[2] * shape[3] > 1;
}

// The shape whose row-major order is `shape`'s NHWC order: [N, C, H, W] -> [N, H, W, C].
inline Shape channels_last_storage_shape(const Shape& shape) {
  return {shape[0], shape[2], shape[3], shape[1]};
}

}  // namespace demi

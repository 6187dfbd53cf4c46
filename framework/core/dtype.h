// DType: the element types demi stores, with their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "framework/core/error.h"
#include "framework/core/half.h"

namespace demi {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  DEMI_THROW("internal error: unknown DType ", static_cast<int>(t));
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "unknown";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
// fp16 and bf16: computed with fp32 accumulation and rounded once on output.
inline bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

// The dtype both operands of a binary op are computed in: the wider floating type, and fp32 when
// fp16 meets bf16 (neither holds the other), as PyTorch promotes.
inline DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::F64 || b == DType::F64) return DType::F64;
  if (a == DType::F32 || b == DType::F32) return DType::F32;
  if (is_half(a) && is_half(b)) return DType::F32;
  if (is_floating(a)) return a;
  if (is_floating(b)) return b;
  return DType::I64;
}

// PyTorch's result type of two tensors of ranks rank_a and rank_b: a floating operand beats an
// integer one (a uint8 mask times an fp16 tensor is fp16); between floating ones a 0-d tensor counts
// like a Python scalar, so it does not widen a tensor with dimensions (bf16 [N] * fp32 0-d is bf16),
// and two of the same kind (both 0-d, or both not) promote as promote_types.
inline DType result_type(DType a, int64_t rank_a, DType b, int64_t rank_b) {
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (rank_a == 0 && rank_b > 0) return b;
  if (rank_b == 0 && rank_a > 0) return a;
  return promote_types(a, b);
}

inline std::ostream& operator<<(std::ostream& out, DType t) { return out << dtype_name(t); }

// C++ scalar type -> DType, for item<T>(), to_vector<T>() and the kernels' dispatch.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };

}  // namespace demi

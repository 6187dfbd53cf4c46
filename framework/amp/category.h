// Autocast categories: how autocast treats an op's floating inputs (PyTorch's CastPolicy).
#pragma once

#include <ostream>

namespace demi::amp {

enum class Category {
  LowerPrecision,  // GEMM-backed (conv, linear, matmul): inputs cast to the autocast dtype
  Fp32,            // numerically sensitive (softmax, losses, exp/log, reductions): inputs cast to fp32
  Promote,         // multi-input (add, mul, ...): inputs cast to the widest input dtype
  Unchanged,       // runs in its input's dtype (relu, pooling, batch_norm, views)
};

inline const char* category_name(Category c) {
  switch (c) {
    case Category::LowerPrecision: return "lower_precision";
    case Category::Fp32: return "fp32";
    case Category::Promote: return "promote";
    case Category::Unchanged: return "unchanged";
  }
  return "unknown";
}
inline std::ostream& operator<<(std::ostream& out, Category c) { return out << category_name(c); }

}  // namespace demi::amp

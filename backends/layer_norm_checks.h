// The argument checks of the layer_norm kernels (backends/kernels.h, LayerNormArgs), which every
// backend runs before its own (kernels.cpp), so CPU and CUDA refuse the same inputs with the same
// messages. Host-only C++, beside kernel_checks.h.
#pragma once

#include <cstdint>
#include <optional>

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace demi::backend {

// The statistics' dtype (mean, rstd) and the accumulation's: F64 for F64 inputs, else F32.
inline DType layer_norm_stats_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

// Whether weight, bias or their gradients may have dtype `param` beside an input of dtype `input`:
// the input's own, or float32 beside a half input (torch's mixed-dtype layer_norm).
inline bool layer_norm_param_dtype_ok(DType input, DType param) {
  return param == input || (is_half(input) && param == DType::F32);
}

// A ref the kernel must read or write: given, or without elements (whose data may be null).
inline bool layer_norm_present(const TensorRef& t) { return t.defined() || t.numel() == 0; }

// A weight, bias or gradient of one, if given: cols elements of an allowed dtype, and the dtype of
// the others given (`shared`, set by the first).
inline void check_layer_norm_param(const char* op, const char* name, const TensorRef& t, const LayerNormArgs& a,
                                   std::optional<DType>& shared) {
  if (!t.defined()) return;
  DEMI_CHECK(t.numel() == a.cols, op, ": ", name, " ", t.shape, " must have ", a.cols,
             " elements, one per normalised element of a row");
  DEMI_CHECK(layer_norm_param_dtype_ok(a.input.dtype, t.dtype), op, ": ", name, " must be ", a.input.dtype,
             is_half(a.input.dtype) ? " or float32" : "", " for a ", a.input.dtype, " input, got ", t.dtype);
  DEMI_CHECK(!shared || *shared == t.dtype, op, ": ", name, " is ", t.dtype, " but another parameter (or its "
             "gradient) is ", *shared, "; weight, bias and their gradients must share a dtype");
  shared = t.dtype;
}

inline void check_layer_norm_like_input(const char* op, const char* name, const TensorRef& t, const LayerNormArgs& a) {
  DEMI_CHECK(layer_norm_present(t) && t.dtype == a.input.dtype && t.numel() == a.input.numel(), op, ": ", name, " ",
             t.shape, " ", t.dtype, " must have input's dtype and number of elements (", a.input.shape, " ",
             a.input.dtype, ")");
}

// What forward and backward share: the input, the statistics, weight and bias.
inline void check_layer_norm_common(const char* op, const LayerNormArgs& a, std::optional<DType>& params) {
  DEMI_CHECK(is_floating(a.input.dtype), op, ": input must be floating, got ", a.input.dtype);
  DEMI_CHECK(a.cols >= 0, op, ": cols must not be negative, got ", a.cols);
  const DType s = layer_norm_stats_dtype(a.input.dtype);
  DEMI_CHECK(layer_norm_present(a.mean) && layer_norm_present(a.rstd) && a.mean.dtype == s && a.rstd.dtype == s &&
                 a.mean.numel() == a.rstd.numel(),
             op, ": mean ", a.mean.shape, " ", a.mean.dtype, " and rstd ", a.rstd.shape, " ", a.rstd.dtype, " must be ",
             s, " with one element per row");
  const int64_t rows = a.mean.numel();
  DEMI_CHECK(a.input.numel() == rows * a.cols, op, ": input ", a.input.shape, " has ", a.input.numel(),
             " elements, not ", rows, " rows (mean's elements) of ", a.cols);
  check_layer_norm_param(op, "weight", a.weight, a, params);
  check_layer_norm_param(op, "bias", a.bias, a, params);
}

inline void check_layer_norm_forward(const LayerNormArgs& a) {
  const char* op = "layer_norm";
  std::optional<DType> params;
  check_layer_norm_common(op, a, params);
  check_layer_norm_like_input(op, "output", a.output, a);
  DEMI_CHECK(a.output.data != a.input.data || a.input.numel() == 0, op, ": output must not be input (no in-place)");
}

inline void check_layer_norm_backward(const LayerNormArgs& a) {
  const char* op = "layer_norm_backward";
  std::optional<DType> params;
  check_layer_norm_common(op, a, params);
  check_layer_norm_like_input(op, "grad_output", a.grad_output, a);
  if (a.grad_input.defined()) {
    check_layer_norm_like_input(op, "grad_input", a.grad_input, a);
    DEMI_CHECK(a.grad_input.data != a.grad_output.data && a.grad_input.data != a.input.data, op,
               ": grad_input must not be grad_output or input (no in-place)");
  }
  check_layer_norm_param(op, "grad_weight", a.grad_weight, a, params);
  check_layer_norm_param(op, "grad_bias", a.grad_bias, a, params);
}

}  // namespace demi::backend

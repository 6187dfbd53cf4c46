// The argument checks of the optimizer and loss-scaling kernels (backends/kernels.h: SgdArgs,
// AdamWArgs, UnscaleArgs, ScaleUpdateArgs), which every backend runs before its own (kernels.cpp).
#pragma once

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace demi::backend {

// --- sgd, adamw ----------------------------------------------------------------------------------

// An optimizer's optional found_inf: a one-element float32 tensor (GradScaler's).
inline void check_found_inf(const char* op, const TensorRef& found_inf) {
  DEMI_CHECK(!found_inf.defined() || (found_inf.dtype == DType::F32 && found_inf.numel() == 1), op,
             ": found_inf must be a one-element float32 tensor, got ", found_inf.dtype, " ", found_inf.shape);
}

// An optimizer's optional lr_tensor: a one-element float64 tensor (Optimizer::set_capturable's).
inline void check_lr_tensor(const char* op, const TensorRef& lr_tensor) {
  DEMI_CHECK(!lr_tensor.defined() || (lr_tensor.dtype == DType::F64 && lr_tensor.numel() == 1), op,
             ": lr_tensor must be a one-element float64 tensor, got ", lr_tensor.dtype, " ", lr_tensor.shape);
}

// The dtype of an optimizer's state (momentum buffer, moments) for a param dtype.
inline DType optimizer_state_dtype(DType param) { return param == DType::F64 ? DType::F64 : DType::F32; }

inline void check_sgd_step(const SgdArgs& args) {
  constexpr const char* op = "sgd_step";
  const TensorRef& param = args.param;
  const TensorRef& grad = args.grad;
  DEMI_CHECK(param.defined() && grad.defined(), op, ": param and grad are required");
  DEMI_CHECK(grad.numel() == param.numel(), op, ": grad ", grad.shape, " does not match param ", param.shape);
  DEMI_CHECK(args.lr >= 0.0 && args.momentum >= 0.0 && args.weight_decay >= 0.0, op,
             ": lr, momentum and weight_decay must be >= 0, got lr = ", args.lr, ", momentum = ", args.momentum,
             ", weight_decay = ", args.weight_decay);
  DEMI_CHECK(!args.nesterov || (args.momentum > 0.0 && args.dampening == 0.0), op,
             ": nesterov needs momentum > 0 and dampening = 0, got momentum = ", args.momentum,
             ", dampening = ", args.dampening);
  const DType state_dtype = optimizer_state_dtype(param.dtype);
  if (args.momentum != 0.0) {
    const TensorRef& buf = args.momentum_buffer;
    DEMI_CHECK(buf.defined(), op, ": momentum = ", args.momentum,
               " needs a momentum_buffer shaped like param ", param.shape);
    DEMI_CHECK(buf.numel() == param.numel() && buf.dtype == state_dtype, op, ": momentum_buffer ", buf.shape,
               " ", buf.dtype, " must be ", param.shape, " ", state_dtype, " for a ", param.dtype, " param");
  }
  if (args.master.defined()) {
    DEMI_CHECK(param.dtype != DType::F64, op, ": a float32 master copy of a float64 param would lose precision; "
               "pass no master for float64 params");
    DEMI_CHECK(args.master.dtype == DType::F32 && args.master.numel() == param.numel(), op, ": master ",
               args.master.shape, " ", args.master.dtype, " must be float32 shaped like param ", param.shape);
  }
  check_found_inf(op, args.found_inf);
  check_lr_tensor(op, args.lr_tensor);
}

inline void check_adamw_step(const AdamWArgs& args) {
  constexpr const char* op = "adamw_step";
  const TensorRef& param = args.param;
  DEMI_CHECK(param.defined() && args.grad.defined(), op, ": param and grad are required");
  DEMI_CHECK(args.grad.numel() == param.numel(), op, ": grad ", args.grad.shape, " does not match param ", param.shape);
  DEMI_CHECK(args.lr >= 0.0 && args.weight_decay >= 0.0 && args.eps >= 0.0 && args.beta1 >= 0.0 && args.beta1 < 1.0 &&
                 args.beta2 >= 0.0 && args.beta2 < 1.0 && args.step >= 1,
             op, ": need lr, weight_decay, eps >= 0, betas in [0, 1) and step >= 1");
  const DType state_dtype = optimizer_state_dtype(param.dtype);
  for (const TensorRef* moment : {&args.exp_avg, &args.exp_avg_sq}) {
    DEMI_CHECK(moment->defined() && moment->numel() == param.numel() && moment->dtype == state_dtype, op,
               ": moments must be ", state_dtype, " shaped like param ", param.shape);
  }
  if (args.master.defined()) {
    DEMI_CHECK(param.dtype != DType::F64 && args.master.dtype == DType::F32 && args.master.numel() == param.numel(),
               op, ": master must be float32 shaped like param ", param.shape, " (and param not float64)");
  }
  check_found_inf(op, args.found_inf);
  DEMI_CHECK(!args.step_count.defined() || (args.step_count.dtype == DType::I64 && args.step_count.numel() == 1), op,
             ": step_count must be a one-element int64 tensor, got ", args.step_count.dtype, " ", args.step_count.shape);
  check_lr_tensor(op, args.lr_tensor);
  DEMI_CHECK(!args.lr_tensor.defined() || args.step_count.defined(), op,
             ": lr_tensor needs step_count (the bias corrections are then derived on the device)");
}

// --- amp -----------------------------------------------------------------------------------------

// unscale_check_finite's arguments: one target per gradient (out[k] has in[k]'s size and its dtype
// or float32), one-element float32 inv_scale and found_inf.
inline void check_unscale(const UnscaleArgs& args) {
  DEMI_CHECK(args.in.size() == args.out.size(), "unscale_check_finite: ", args.in.size(), " inputs but ",
             args.out.size(), " outputs");
  DEMI_CHECK(args.inv_scale.dtype == DType::F32 && args.inv_scale.numel() == 1 && args.found_inf.dtype == DType::F32 &&
                 args.found_inf.numel() == 1,
             "unscale_check_finite: inv_scale and found_inf must be one-element float32 tensors");
  for (size_t k = 0; k < args.in.size(); ++k) {
    const TensorRef& in = args.in[k];
    const TensorRef& out = args.out[k];
    DEMI_CHECK(is_floating(in.dtype), "unscale_check_finite: gradient ", k, " is ", in.dtype, " ", in.shape,
               "; gradients must be float32, float64, float16 or bfloat16");
    DEMI_CHECK(in.numel() == out.numel() && (out.dtype == in.dtype || out.dtype == DType::F32),
               "unscale_check_finite: gradient ", k, " (", in.dtype, " ", in.shape, ") cannot be unscaled into ",
               out.dtype, " ", out.shape, "; the target must have its size and its dtype or float32");
  }
}

inline void check_update_scale(const ScaleUpdateArgs& args) {
  DEMI_CHECK(args.scale.dtype == DType::F32 && args.growth_tracker.dtype == DType::I64 &&
                 args.found_inf.dtype == DType::F32,
             "update_scale: scale and found_inf must be float32 and growth_tracker int64");
  DEMI_CHECK(!args.step_counts.defined() || (args.step_counts.dtype == DType::I64 && args.step_counts.numel() == 3),
             "update_scale: step_counts must hold 3 int64 (taken, skipped, skipped in a row), got ",
             args.step_counts.dtype, " ", args.step_counts.shape);
}

}  // namespace demi::backend

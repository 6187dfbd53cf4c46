// augment_images' argument checks, shared by every backend (see kernel_checks.h).
#pragma once

#include <cstdint>

#include "backends/kernels.h"
#include "framework/core/error.h"

namespace demi::backend {

inline void check_augment_images(const AugmentArgs& a) {
  const char* op = "augment_images";
  const TensorRef &images = a.images, &plan = a.plan, &out = a.output;
  DEMI_CHECK(images.dtype == DType::U8 && images.shape.size() == 4 && images.shape[1] == 3, op,
             ": images must be uint8 [N, 3, H, W], got ", images.dtype, " ", images.shape);
  DEMI_CHECK(a.lut.dtype == DType::F32 && a.lut.shape == (Shape{3, 256}), op, ": lut must be float32 [3, 256], got ",
             a.lut.dtype, " ", a.lut.shape);
  DEMI_CHECK(plan.dtype == DType::I64 && plan.shape.size() == 2 && plan.shape[1] == 6, op,
             ": plan must be int64 [B, 6], got ", plan.dtype, " ", plan.shape);
  DEMI_CHECK(out.dtype == DType::F32 || out.dtype == DType::F16 || out.dtype == DType::BF16, op,
             ": output must be float32, float16 or bfloat16, got ", out.dtype);
  DEMI_CHECK(out.shape == (Shape{plan.shape[0], 3, images.shape[2], images.shape[3]}), op, ": output must be [",
             plan.shape[0], ", 3, ", images.shape[2], ", ", images.shape[3], "] for plan ", plan.shape, " and images ",
             images.shape, ", got ", out.shape);
  DEMI_CHECK(a.cutout >= 0, op, ": cutout must be >= 0, got ", a.cutout);
}

}  // namespace demi::backend

// Helpers shared by op files: the conversion/view ops Tensor's methods call, broadcasting's
// gradient helpers and argument checks. Not part of the public API.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "framework/ops/op.h"

namespace demi::ops {

// Differentiable conversions and views behind Tensor::to() and Tensor::reshape().
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, const Device& device);
Tensor reshape(const Tensor& x, const Shape& shape);
// Behind Tensor::contiguous(format): the values stored in `format` (ChannelsLast: x is 4-D).
Tensor to_memory_format(const Tensor& x, MemoryFormat format);

// Sums a broadcast gradient back down to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);
// Broadcasts `x` up to `shape` (numpy rules).
Tensor expand_to(const Tensor& x, const Shape& shape);
// Reduction over `dims` keeping them as extent-1 dims; `kind` Sum or Mean; output dtype `dtype`.
Tensor reduce_keepdim(backend::ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, DType dtype);

// clamp's bounds as numbers (an absent one is -inf or inf), checked: at least one given, none NaN.
std::pair<double, double> clamp_bounds(const char* op, std::optional<double> min, std::optional<double> max);

// The caller's mistakes, with the op's name in the message.
void check_floating(const char* op, const char* what, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_dim(const char* op, const char* what, const Tensor& t, int64_t dim, const char* layout);

}  // namespace demi::ops

namespace demi::ops {
// Runs an element-wise binary kernel with broadcasting and dtype promotion (not recorded). The
// result is stored in elementwise_format's choice; the operands are read in that order.
Tensor binary_kernel(const char* op, backend::BinaryKind kind, const Tensor& a, const Tensor& b);
// Runs an element-wise unary kernel into a new tensor of x's dtype and format (not recorded).
Tensor unary_kernel(backend::UnaryKind kind, const Tensor& x, double alpha = 0.0, double beta = 0.0);

// The format of an element-wise result of `shape` (PyTorch's rule): that of the first operand that
// has the result's shape; channels_last when none has it and one is channels_last.
MemoryFormat elementwise_format(const Shape& shape, const std::vector<const Tensor*>& operands);
// An operand of an element-wise kernel whose result has `shape` and is stored in `format`: its
// storage read in the result's order. `keep` holds a converted copy when its own order differs.
struct ElementwiseOperand {
  Tensor keep;
  backend::TensorRef ref;
};
ElementwiseOperand elementwise_operand(const Tensor& t, const Shape& shape, MemoryFormat format);

// The 4-D ops with NHWC kernels (conv2d, pooling, batch norm) run NHWC when an input is
// channels_last and x's backend has the kernels (KernelFamily::ChannelsLast); elsewhere they
// read contiguous copies, so a channels_last input costs one conversion at the op's edge.
bool runs_channels_last(const Tensor& x, const Tensor& other = Tensor());
// The format an op's kernels read and write: ChannelsLast when they run NHWC.
inline MemoryFormat kernel_format(bool nhwc) { return nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous; }
// t stored as the kernel reads it: channels_last when `nhwc`, else contiguous. A conversion here
// is not recorded: the op's backward returns gradients in its kernels' format and the engine
// converts each to its input's.
Tensor in_kernel_format(const Tensor& t, bool nhwc);
// The kernel's view of a tensor in_kernel_format gave: its data under its [N, C, H, W] shape (the
// args' channels_last flag tells the kernel the storage order).
backend::TensorRef kernel_ref(const Tensor& t, bool nhwc);
}  // namespace demi::ops

namespace demi::ops {
// op(a) @ op(b) (+ bias) for 2-D operands, or 3-D ones [batch, ., .]: a 2-D operand, or a 3-D one of
// batch 1 beside a larger batch, is shared by every product (batch stride 0). The result has a's
// dtype, or `out` (a wider one: half products kept in fp32).
Tensor gemm(const Tensor& a, backend::Transpose trans_a, const Tensor& b, backend::Transpose trans_b,
            const Tensor& bias = Tensor(), std::optional<DType> out = std::nullopt);
}  // namespace demi::ops

namespace demi::ops {
// Runs the where kernel into a new tensor of `shape`: cond ? a : b, cond uint8, a and b of one dtype
// (any), all three broadcasting to shape (not recorded).
Tensor where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape);
}  // namespace demi::ops

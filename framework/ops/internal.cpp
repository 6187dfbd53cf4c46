// Shared op helpers: broadcasting's gradient (sum_to / expand_to), keep-dim reductions and the
// argument checks whose messages every op shares.
#include "framework/ops/internal.h"

#include <algorithm>

#include "framework/tensor/factories.h"

namespace demi::ops {

Tensor reduce_keepdim(backend::ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, DType dtype) {
  Shape out_shape = x.shape();
  for (int64_t d : dims) out_shape[static_cast<size_t>(d)] = 1;
  if (x.suggest_memory_format() == MemoryFormat::ChannelsLast) {
    // Reduced in its own order, the result too (a bias gradient [1, C, 1, 1] is the same bytes
    // in both formats, and so is any result with one channel or one pixel).
    Tensor out = empty(out_shape, dtype, x.device(), MemoryFormat::ChannelsLast);
    const backend::TensorRef out_ref{out.data_ptr(), channels_last_storage_shape(out_shape), dtype};
    kernels(x).reduce(kind, x.storage_ref(), out_ref);
    return out;
  }
  Tensor out = empty(out_shape, dtype, x.device());
  kernels(x).reduce(kind, x.ref(), out.ref());
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const size_t n = grad.shape().size();
  DEMI_INTERNAL_CHECK(shape.size() <= n, "sum_to ", grad.shape(), " -> ", shape);
  const size_t lead = n - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < n; ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor summed = reduce_keepdim(backend::ReduceKind::Sum, grad, dims, grad.dtype());
  return summed.reshape(shape);
}

Tensor expand_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  Tensor out = empty(shape, x.dtype(), x.device());
  Tensor zero = zeros({}, x.dtype(), x.device());
  kernels(x).binary(backend::BinaryKind::Add, x.contiguous().ref(), zero.ref(), out.ref());
  return out;
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  DEMI_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  DEMI_CHECK(is_floating(t.dtype()), op, ": ", what, " must be a floating tensor (float32, float16, "
             "bfloat16 or float64), got ", t.dtype(), "; convert it with .to(DType::F32)");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DEMI_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device(),
             " and ", b.device(), "); move one with .to(device)");
}

void check_dim(const char* op, const char* what, const Tensor& t, int64_t dim, const char* layout) {
  DEMI_CHECK(t.dim() == dim, op, ": ", what, " must be ", layout, ", got shape ", t.shape());
}

}  // namespace demi::ops

namespace demi::ops {

namespace {

// PyTorch's CPU kernels keep a 0-d float32/float64 second operand of a product or a quotient
// with a float16/bfloat16 tensor at its own precision ("a CPU scalar", read in opmath): x_half *
// torch.tensor(1.0003) rounds once, where converting the scalar to x's dtype first would round
// twice. Only there: s * x, x + s and x - s round the scalar first in PyTorch 2.15 as well.
// Returns an undefined tensor where this does not apply.
Tensor host_scalar_kernel(backend::BinaryKind kind, const Tensor& a, const Tensor& b, DType dtype) {
  using backend::BinaryKind;
  if (!is_half(dtype) || !b.device().is_cpu() || b.dim() != 0 || a.dim() == 0) return {};
  if ((kind != BinaryKind::Mul && kind != BinaryKind::Div) || (b.dtype() != DType::F32 && b.dtype() != DType::F64)) {
    return {};
  }
  const double s = b.dtype() == DType::F32 ? *static_cast<const float*>(b.data_ptr())
                                            : *static_cast<const double*>(b.data_ptr());
  return kind == BinaryKind::Mul ? unary_kernel(backend::UnaryKind::Affine, a, s, -0.0)  // -0 keeps x * s's -0
                                 : unary_kernel(backend::UnaryKind::DivScalar, a, s);
}

}  // namespace

Tensor binary_kernel(const char* op, backend::BinaryKind kind, const Tensor& a, const Tensor& b) {
  // One integer operand (a mask) joins a floating one, as in PyTorch; arithmetic on two integer
  // tensors is not demi's business.
  DEMI_CHECK(is_floating(a.dtype()) || is_floating(b.dtype()), op, ": both operands are integer tensors (",
             a.dtype(), " and ", b.dtype(), "); arithmetic needs a floating operand: convert one with .to(DType::F32)");
  check_same_device(op, a, b);
  const DType dtype = result_type(a.dtype(), a.dim(), b.dtype(), b.dim());
  if (Tensor out = host_scalar_kernel(kind, a, b, dtype); out.defined()) return out;
  const Tensor ca = a.to(dtype), cb = b.to(dtype);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const MemoryFormat format = elementwise_format(shape, {&a, &b});
  Tensor out = empty(shape, dtype, a.device(), format);
  const ElementwiseOperand ra = elementwise_operand(ca, shape, format), rb = elementwise_operand(cb, shape, format);
  kernels(out).binary(kind, ra.ref, rb.ref, out.storage_ref());
  return out;
}

Tensor unary_kernel(backend::UnaryKind kind, const Tensor& x, double alpha, double beta) {
  Tensor out = empty_like(x);
  kernels(x).unary(kind, x.storage_ref(), out.storage_ref(), alpha, beta);
  return out;
}

MemoryFormat elementwise_format(const Shape& shape, const std::vector<const Tensor*>& operands) {
  if (!channels_last_differs(shape)) return MemoryFormat::Contiguous;
  for (const Tensor* t : operands) {
    if (t->shape() == shape) return t->suggest_memory_format();
  }
  for (const Tensor* t : operands) {
    if (t->suggest_memory_format() == MemoryFormat::ChannelsLast) return MemoryFormat::ChannelsLast;
  }
  return MemoryFormat::Contiguous;
}

ElementwiseOperand elementwise_operand(const Tensor& t, const Shape& shape, MemoryFormat format) {
  if (format != MemoryFormat::ChannelsLast || !channels_last_differs(shape)) {
    const Tensor c = t.contiguous();
    return {c, c.ref()};
  }
  if (t.suggest_memory_format() == MemoryFormat::ChannelsLast) return {t, t.storage_ref()};
  // A row-major operand broadcast to [N, C, H, W], its shape padded to [a, b, c, d]: moving b
  // behind c and d keeps its bytes in order when b is 1 or c * d is 1 (a per-channel [C, 1, 1]
  // bias, a scalar, a [N, 1, H, W] mask); otherwise it is converted.
  Shape padded(4 - std::min<size_t>(t.shape().size(), 4), 1);
  padded.insert(padded.end(), t.shape().begin(), t.shape().end());
  DEMI_INTERNAL_CHECK(padded.size() == 4, "elementwise_operand: shape ", t.shape(), " beside ", shape);
  if (padded[1] == 1 || padded[2] * padded[3] == 1) {
    return {t, backend::TensorRef{t.data_ptr(), channels_last_storage_shape(padded), t.dtype()}};
  }
  const Tensor c = t.reshape(padded).contiguous(MemoryFormat::ChannelsLast);
  return {c, c.storage_ref()};
}

bool runs_channels_last(const Tensor& x, const Tensor& other) {
  const bool asked = x.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                     (other.defined() && other.suggest_memory_format() == MemoryFormat::ChannelsLast);
  return asked && kernels(x).supports(backend::KernelFamily::ChannelsLast);
}

Tensor in_kernel_format(const Tensor& t, bool nhwc) {
  if (!t.defined()) return t;
  return t.contiguous(kernel_format(nhwc && t.dim() == 4));
}

backend::TensorRef kernel_ref(const Tensor& t, bool nhwc) {
  if (!nhwc) return t.ref();
  DEMI_INTERNAL_CHECK(t.is_contiguous(MemoryFormat::ChannelsLast), "kernel_ref: a ", t.shape(),
                      " tensor not stored NHWC handed to an NHWC kernel");
  return backend::TensorRef{t.data_ptr(), t.shape(), t.dtype()};
}

}  // namespace demi::ops

namespace demi::ops {

Tensor gemm(const Tensor& a, backend::Transpose trans_a, const Tensor& b, backend::Transpose trans_b,
            const Tensor& bias, std::optional<DType> out) {
  using backend::Transpose;
  // A 2-D operand, or a 3-D one of batch 1 beside a larger batch, is one matrix the batch shares.
  const int64_t batch_a = a.dim() == 3 ? a.size(0) : 1, batch_b = b.dim() == 3 ? b.size(0) : 1;
  const int64_t batch = std::max(batch_a, batch_b);
  const bool batched = a.dim() == 3 || b.dim() == 3;
  const int64_t m = trans_a == Transpose::No ? a.size(-2) : a.size(-1);
  const int64_t k = trans_a == Transpose::No ? a.size(-1) : a.size(-2);
  const int64_t kb = trans_b == Transpose::No ? b.size(-2) : b.size(-1);
  const int64_t n = trans_b == Transpose::No ? b.size(-1) : b.size(-2);
  DEMI_INTERNAL_CHECK(k == kb && a.dtype() == b.dtype() && (batch_a == batch || batch_a == 1) &&
                          (batch_b == batch || batch_b == 1),
                      "gemm ", a.shape(), " x ", b.shape());
  Tensor c = empty(batched ? Shape{batch, m, n} : Shape{m, n}, out.value_or(a.dtype()), a.device());
  if (batch == 0) return c;
  backend::GemmArgs args;
  args.a = a.ref();
  args.b = b.ref();
  args.c = c.ref();
  if (bias.defined()) args.bias = bias.ref();
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.batch = batch;
  args.stride_a = batch_a == 1 && batch > 1 ? 0 : m * k;
  args.stride_b = b.dim() == 3 && batch_b == batch ? k * n : 0;
  args.stride_c = m * n;
  kernels(a).gemm(args);
  return c;
}

}  // namespace demi::ops

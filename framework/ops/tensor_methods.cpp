// Tensor's libtorch-style methods: each is one call of the free function of the same name, so every
// op keeps one implementation; the in-place ones run the same kernels into the tensor's own storage
// (or write the out-of-place result back where dtypes or shapes differ).
#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/internal.h"
#include "framework/ops/ops.h"

namespace demi {

Tensor Tensor::sum(std::vector<int64_t> dims, bool keepdim) const { return demi::sum(*this, std::move(dims), keepdim); }
Tensor Tensor::mean(std::vector<int64_t> dims, bool keepdim) const { return demi::mean(*this, std::move(dims), keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return demi::argmax(*this, dim, keepdim); }
Tensor Tensor::exp() const { return demi::exp(*this); }
Tensor Tensor::log() const { return demi::log(*this); }
Tensor Tensor::sqrt() const { return demi::sqrt(*this); }
Tensor Tensor::pow(double exponent) const { return demi::pow(*this, exponent); }
Tensor Tensor::relu() const { return demi::relu(*this); }
Tensor Tensor::gelu() const { return demi::gelu(*this); }
Tensor Tensor::neg() const { return demi::neg(*this); }
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const { return demi::clamp(*this, min, max); }
Tensor Tensor::softmax(int64_t dim) const { return demi::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return demi::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& other) const { return demi::matmul(*this, other); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return demi::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  DEMI_CHECK(dim() <= 2, "t(): expects a tensor of at most 2 dims, got shape ", shape(),
             "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : demi::transpose(*this, 0, 1);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return demi::select(*this, dim, index); }
Tensor Tensor::eq(const Tensor& other) const { return demi::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return demi::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return demi::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return demi::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return demi::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return demi::ge(*this, other); }
Tensor Tensor::abs() const { return demi::abs(*this); }
Tensor Tensor::max() const { return demi::max(*this); }
Tensor Tensor::min() const { return demi::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return demi::max(*this, dim, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return demi::min(*this, dim, keepdim); }
Tensor Tensor::amax(std::vector<int64_t> dims, bool keepdim) const { return demi::amax(*this, std::move(dims), keepdim); }
Tensor Tensor::amin(std::vector<int64_t> dims, bool keepdim) const { return demi::amin(*this, std::move(dims), keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return demi::argmin(*this, dim, keepdim); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return demi::masked_fill(*this, mask, value); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return demi::permute(*this, dims); }
Tensor Tensor::unsqueeze(int64_t dim) const { return demi::unsqueeze(*this, dim); }
Tensor Tensor::squeeze() const { return demi::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return demi::squeeze(*this, dim); }
Tensor Tensor::expand(const Shape& shape) const { return demi::expand(*this, shape); }

namespace {

// What autograd cannot follow: writing into a tensor it tracks, or folding a tracked operand into
// an untracked one (its gradient would silently stop there).
void check_in_place(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  DEMI_CHECK(self.defined(), op, ": the tensor is undefined");
  if (!is_grad_enabled()) return;
  DEMI_CHECK(!self.requires_grad(), op, ": in-place on a tensor that requires grad, which autograd cannot record; "
             "do it under NoGradGuard (as optimizers and initialisers do), or use the out-of-place op");
  DEMI_CHECK(!other.defined() || !other.requires_grad(), op, ": the operand requires grad, and an in-place result "
             "would drop its gradient; use the out-of-place op (a = a + b), or NoGradGuard");
}

}  // namespace

const Tensor& Tensor::assign_in_place(const char* op, const Tensor& result) const {
  DEMI_CHECK(result.shape() == shape(), op, ": the result has shape ", result.shape(), " but this tensor is ",
             shape(), "; an in-place op keeps the shape, so the other operand must broadcast to it");
  const Tensor value = result.contiguous(suggest_memory_format());  // into this tensor's order
  kernels(*this).cast(value.storage_ref(), storage_ref());
  impl_ref().storage->bump_version();
  return *this;
}

// Straight into this storage when the out-of-place op would compute in this tensor's dtype and
// shape anyway (the same kernel, the same numbers, no temporary); else its result is written back.
const Tensor& Tensor::binary_in_place(const char* op, backend::BinaryKind kind, const Tensor& other) const {
  check_in_place(op, *this, other);
  DEMI_CHECK(other.defined(), op, ": the operand is undefined");
  NoGradGuard no_grad;
  if (is_floating(dtype()) && other.device() == device() &&
      result_type(dtype(), dim(), other.dtype(), other.dim()) == dtype() &&
      broadcast_shapes(shape(), other.shape(), op) == shape()) {
    const ops::ElementwiseOperand b = ops::elementwise_operand(other.to(dtype()), shape(), suggest_memory_format());
    kernels(*this).binary(kind, storage_ref(), b.ref, storage_ref());
    impl_ref().storage->bump_version();
    return *this;
  }
  return assign_in_place(op, ops::binary_kernel(op, kind, *this, other));
}

// alpha * x + beta in place. An integer tensor (a counter, labels) is computed in float64, which
// holds its values exactly below 2^53, and stays integer: whole numbers only.
const Tensor& Tensor::affine_in_place(const char* op, double alpha, double beta) const {
  check_in_place(op, *this);
  NoGradGuard no_grad;
  if (is_floating(dtype())) {
    kernels(*this).unary(backend::UnaryKind::Affine, storage_ref(), storage_ref(), alpha, beta);
    impl_ref().storage->bump_version();
    return *this;
  }
  DEMI_CHECK(std::trunc(alpha) == alpha && std::trunc(beta) == beta, op, ": ", (std::trunc(beta) == beta ? alpha : beta),
             " is not a whole number, and this tensor is ", dtype(), "; convert it to a floating dtype first");
  return assign_in_place(op, ops::unary_kernel(backend::UnaryKind::Affine, to(DType::F64), alpha, beta));
}

const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  if (alpha == 1.0) return binary_in_place("add_", backend::BinaryKind::Add, other);
  check_in_place("add_", *this, other);  // before the guard: the scaled operand is an untracked temporary
  NoGradGuard no_grad;
  return binary_in_place("add_", backend::BinaryKind::Add, other * alpha);
}
const Tensor& Tensor::add_(double value) const { return affine_in_place("add_", 1.0, value); }
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  if (alpha == 1.0) return binary_in_place("sub_", backend::BinaryKind::Sub, other);
  check_in_place("sub_", *this, other);  // before the guard: the scaled operand is an untracked temporary
  NoGradGuard no_grad;
  return binary_in_place("sub_", backend::BinaryKind::Sub, other * alpha);
}
const Tensor& Tensor::sub_(double value) const { return affine_in_place("sub_", 1.0, -value); }
const Tensor& Tensor::mul_(const Tensor& other) const { return binary_in_place("mul_", backend::BinaryKind::Mul, other); }
const Tensor& Tensor::mul_(double value) const { return affine_in_place("mul_", value, -0.0); }  // -0: no shift
const Tensor& Tensor::div_(const Tensor& other) const { return binary_in_place("div_", backend::BinaryKind::Div, other); }
const Tensor& Tensor::div_(double value) const {  // a true division, as x / value
  check_in_place("div_", *this);
  DEMI_CHECK(is_floating(dtype()), "div_: the tensor must be floating, got ", dtype(), "; convert it first");
  kernels(*this).unary(backend::UnaryKind::DivScalar, storage_ref(), storage_ref(), value, 0.0);
  impl_ref().storage->bump_version();
  return *this;
}
const Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) const {
  check_in_place("clamp_", *this);
  const auto [lo, hi] = ops::clamp_bounds("clamp_", min, max);
  DEMI_CHECK(is_floating(dtype()), "clamp_: the tensor must be floating, got ", dtype());
  kernels(*this).unary(backend::UnaryKind::Clamp, storage_ref(), storage_ref(), lo, hi);
  impl_ref().storage->bump_version();
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_in_place("copy_", *this, src);
  DEMI_CHECK(src.defined(), "copy_: the source is undefined");
  NoGradGuard no_grad;
  Tensor value = src.to(device());
  if (value.shape() != shape()) {
    DEMI_CHECK(broadcast_shapes(value.shape(), shape(), "copy_") == shape(), "copy_: the source ", src.shape(),
               " does not broadcast to this tensor's shape ", shape());
    DEMI_CHECK(is_floating(value.dtype()) || is_floating(dtype()), "copy_: broadcasting an integer source ",
               src.shape(), " into an integer tensor ", shape(), " is not supported; give it this tensor's shape");
    value = ops::expand_to(value.to(is_floating(dtype()) ? dtype() : value.dtype()), shape());
  }
  return assign_in_place("copy_", value);
}

const Tensor& Tensor::fill_(double value) const {
  check_in_place("fill_", *this);
  kernels(*this).fill(storage_ref(), value);
  impl_ref().storage->bump_version();
  return *this;
}

}  // namespace demi

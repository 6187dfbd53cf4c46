// demi::Tensor: a reference-counted handle to dense storage with a shape, dtype, device and memory
// format (row-major, or NHWC for a channels_last 4-D tensor), plus the autograd fields (requires_grad, grad, grad_fn). Copies of a Tensor share
// everything, as in PyTorch; views (reshape, slice) share storage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "backends/kernels.h"
#include "framework/tensor/allocator.h"
#include "framework/core/device.h"
#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/memory_format.h"
#include "framework/core/shape.h"

namespace demi {

namespace autograd {
class Node;
}

// A block of device memory from the caching allocator, returned to it when the last view dies.
class Storage {
 public:
  Storage(const Device& device, size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }
  // What this memory holds, for memory_report().
  MemoryCategory category() const { return category_; }
  void set_category(MemoryCategory category);
  // Counts in-place writes through Tensor's in-place methods (add_, copy_, ...), so that backward
  // can refuse a saved tensor that was modified after it was saved (PyTorch's version counter).
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Device device_;
  size_t nbytes_;
  void* data_;
  MemoryCategory category_ = MemoryCategory::Other;
  uint64_t version_ = 0;
};

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage (an absent optional input, an unset grad)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // Raw data of this view (offset applied). Host-readable only on the CPU.
  void* data_ptr() const;
  template <typename T> T* data() const {
    DEMI_CHECK(dtype() == DTypeOf<T>::value, "Tensor::data<T>: tensor is ", dtype(), ", not ",
               DTypeOf<T>::value, "; use to(DType) first");
    return static_cast<T*>(data_ptr());
  }
  // Non-owning view for the backend kernels, in the shape's order. A channels_last tensor has none:
  // an op that takes one either reads its storage order (storage_ref) or converts it first.
  backend::TensorRef ref() const;
  // The storage as a row-major tensor: the shape [N, H, W, C] for channels_last, else ref(). For
  // kernels that do not care about the order (element-wise ops, optimizers, fills).
  backend::TensorRef storage_ref() const;

  // Memory format of a 4-D tensor (framework/core/memory_format.h); the shape is [N, C, H, W] in
  // both. suggest_memory_format() is the format the tensor is stored in; is_contiguous(f) is true
  // when it is stored in f (both, for a 4-D tensor with one channel or one pixel).
  MemoryFormat suggest_memory_format() const;
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  // The same values stored in `format` (differentiable; *this when already so): contiguous() for
  // row-major, contiguous(MemoryFormat::ChannelsLast) for NHWC.
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;

  // Conversions (differentiable; a no-op returns *this).
  Tensor to(DType dtype) const;
  Tensor to(const Device& device) const;

  // Views sharing storage. reshape accepts one -1 extent. Differentiable.
  Tensor reshape(Shape shape) const;
  Tensor view(Shape shape) const { return reshape(std::move(shape)); }
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Rows [begin, end) of dim 0, zero-copy (a batch out of a dataset). Not recorded by autograd.
  Tensor slice(int64_t begin, int64_t end) const;

  // A new tensor with its own storage and the same values (not recorded by autograd).
  Tensor clone() const;
  // The same storage, cut from the graph: no grad_fn, requires_grad false.
  Tensor detach() const;

  // Autograd.
  Tensor& requires_grad_(bool requires_grad = true);
  bool requires_grad() const;
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Backpropagates from this tensor: grad_output defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad_output = Tensor()) const;
  // Leaves: calls hook(this tensor) each time backward has accumulated a gradient into .grad (as
  // PyTorch's register_post_accumulate_grad_hook; data-parallel training starts a bucket's
  // all-reduce from here). Returns a handle for remove_post_accumulate_grad_hook.
  int register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void remove_post_accumulate_grad_hook(int handle) const;

  // The single value of a one-element tensor, converted to T; item() gives it as a double (what
  // libtorch's Scalar holds for every floating and integer dtype demi has).
  double item() const { return item<double>(); }
  template <typename T> T item() const {
    DEMI_CHECK(numel() == 1, "item(): tensor has ", numel(), " elements (shape ", shape(),
               "); only one-element tensors convert to a scalar; use to_vector<T>()");
    return to_vector<T>()[0];
  }
  // All values, converted to T and copied to the host.
  template <typename T> std::vector<T> to_vector() const {
    std::vector<T> out(static_cast<size_t>(numel()));
    copy_to_host_as(DTypeOf<T>::value, out.data());
    return out;
  }

  // --- libtorch's methods. Each calls the free function of the same name (framework/ops/ops.h) ---
  Tensor sum(std::vector<int64_t> dims = {}, bool keepdim = false) const;
  Tensor mean(std::vector<int64_t> dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor relu() const;
  Tensor gelu() const;
  Tensor neg() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor softmax(int64_t dim = -1) const;
  Tensor log_softmax(int64_t dim = -1) const;
  Tensor matmul(const Tensor& other) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  // transpose(0, 1) of a 2-D tensor; 0-d and 1-D tensors come back as they are (PyTorch's t()).
  Tensor t() const;
  // Row `index` of dim 0 (negative counts from the end), a view sharing this tensor's storage.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor abs() const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amax(std::vector<int64_t> dims = {}, bool keepdim = false) const;
  Tensor amin(std::vector<int64_t> dims = {}, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  // permute copies, as transpose; unsqueeze and squeeze are views; expand copies (no strides).
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;

  // In place, into this tensor's storage (its dtype and shape kept: the result of the out-of-place
  // op must have this shape, and is rounded once into this dtype). Refused on a tensor that requires
  // grad while grad mode is on, as PyTorch refuses it on leaves: use NoGradGuard (torch.no_grad()).
  // Backward refuses a tensor saved for it that was changed in place afterwards.
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double value) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& sub_(double value) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double value) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(double value) const;
  const Tensor& clamp_(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  // Copies src (broadcast to this shape, converted to this dtype, moved to this device).
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const { return fill_(0.0); }
  const Tensor& operator+=(const Tensor& other) const { return add_(other); }
  const Tensor& operator+=(double value) const { return add_(value); }
  const Tensor& operator-=(const Tensor& other) const { return sub_(other); }
  const Tensor& operator-=(double value) const { return sub_(value); }
  const Tensor& operator*=(const Tensor& other) const { return mul_(other); }
  const Tensor& operator*=(double value) const { return mul_(value); }
  const Tensor& operator/=(const Tensor& other) const { return div_(other); }
  const Tensor& operator/=(double value) const { return div_(value); }

  // Tags this tensor's storage for memory_report() (parameters, gradients, optimizer state ...).
  void set_memory_category(MemoryCategory category) const;

  // Identity of the underlying object (two handles to one tensor compare equal).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  TensorImpl& impl_ref() const;

 private:
  void copy_to_host_as(DType dtype, void* out) const;
  // The in-place methods: result written into this storage; a binary op or alpha * x + beta
  // computed in place where the out-of-place op would give the same values in this dtype.
  const Tensor& assign_in_place(const char* op, const Tensor& result) const;
  const Tensor& binary_in_place(const char* op, backend::BinaryKind kind, const Tensor& other) const;
  const Tensor& affine_in_place(const char* op, double alpha, double beta) const;
  std::shared_ptr<TensorImpl> impl_;
};

using TensorList = std::vector<Tensor>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes from storage->data()
  Shape shape;
  DType dtype = DType::F32;
  // ChannelsLast only where the two orders differ (channels_last_differs(shape)).
  MemoryFormat memory_format = MemoryFormat::Contiguous;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;            // set on results of recorded ops
  std::weak_ptr<autograd::Node> grad_accumulator;     // leaves: the node that adds into .grad
  std::vector<std::pair<int, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
};

// A tensor of `shape` with uninitialised contents, stored in `format` (ChannelsLast: 4-D shapes).
Tensor empty(const Shape& shape, DType dtype = DType::F32, const Device& device = Device::cpu(),
             MemoryFormat format = MemoryFormat::Contiguous);
// Shape, device and memory format of `like` (as PyTorch's memory_format=torch.preserve_format).
Tensor empty_like(const Tensor& like);
Tensor empty_like(const Tensor& like, DType dtype);

namespace detail {
// For element-wise kernels over tensors that must share one order (an optimizer's parameter,
// gradient and state; a gradient and its unscaled copy): stores t in like's memory format, in place
// (t keeps its identity: a state made before Module::to(MemoryFormat) follows it), and returns
// t.storage_ref().
backend::TensorRef storage_ref_like(const Tensor& t, const Tensor& like);
}  // namespace detail

// Prints shape, dtype, device and values (summarised with ... beyond 1000 elements).
std::ostream& operator<<(std::ostream& out, const Tensor& t);

// The backend kernels of t's device.
inline backend::Kernels& kernels(const Tensor& t) { return backend::kernels_for(t.device()); }

}  // namespace demi

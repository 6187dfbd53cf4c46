// Tensor's accessors, views and conversions. Differentiable conversions (to, reshape) go through
// their ops in framework/ops; everything else here is bookkeeping.
#include "framework/tensor/tensor.h"

#include <cstring>

#include "backends/host_reads.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/internal.h"
#include "framework/tensor/allocator.h"

namespace demi {

Storage::Storage(const Device& device, size_t nbytes)
    : device_(device), nbytes_(nbytes), data_(detail::allocate(device, nbytes)) {
  detail::recategorize(device_, nbytes_, detail::kNoCategory, category_);
}
Storage::~Storage() {
  detail::recategorize(device_, nbytes_, category_, detail::kNoCategory);
  detail::deallocate(device_, data_);
}
void Storage::set_category(MemoryCategory category) {
  if (category == category_) return;
  detail::recategorize(device_, nbytes_, category_, category);
  category_ = category;
}

void Tensor::set_memory_category(MemoryCategory category) const { impl_ref().storage->set_category(category); }

TensorImpl& Tensor::impl_ref() const {
  DEMI_CHECK(impl_ != nullptr, "use of an undefined Tensor (default-constructed, or a grad that was "
             "never computed); check defined() first");
  return *impl_;
}
const Shape& Tensor::shape() const { return impl_ref().shape; }
int64_t Tensor::numel() const { return shape_numel(impl_ref().shape); }
DType Tensor::dtype() const { return impl_ref().dtype; }
Device Tensor::device() const { return impl_ref().storage->device(); }

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  DEMI_CHECK(d >= -n && d < n, "size(", d, "): dimension out of range for a tensor of shape ", shape());
  return shape()[static_cast<size_t>(d < 0 ? d + n : d)];
}

void* Tensor::data_ptr() const {
  const TensorImpl& impl = impl_ref();
  return static_cast<char*>(impl.storage->data()) + impl.offset;
}

backend::TensorRef Tensor::ref() const {
  const TensorImpl& impl = impl_ref();
  DEMI_INTERNAL_CHECK(impl.memory_format == MemoryFormat::Contiguous, "a channels_last tensor of shape ", impl.shape,
                      " reached a kernel that reads the NCHW order; its op must convert it (contiguous()) first");
  return backend::TensorRef{data_ptr(), impl.shape, impl.dtype};
}

backend::TensorRef Tensor::storage_ref() const {
  const TensorImpl& impl = impl_ref();
  if (impl.memory_format == MemoryFormat::ChannelsLast) {
    return backend::TensorRef{data_ptr(), channels_last_storage_shape(impl.shape), impl.dtype};
  }
  return backend::TensorRef{data_ptr(), impl.shape, impl.dtype};
}

namespace detail {
backend::TensorRef storage_ref_like(const Tensor& t, const Tensor& like) {
  const MemoryFormat format = like.suggest_memory_format();
  if (!t.is_contiguous(format)) {
    NoGradGuard no_grad;
    const Tensor value = t.contiguous(format);
    TensorImpl& impl = t.impl_ref();
    const MemoryCategory category = impl.storage->category();
    impl.storage = value.impl_ref().storage;
    impl.offset = value.impl_ref().offset;
    impl.memory_format = value.impl_ref().memory_format;
    impl.storage->bump_version();
    t.set_memory_category(category);
  }
  return t.storage_ref();
}
}  // namespace detail

MemoryFormat Tensor::suggest_memory_format() const { return impl_ref().memory_format; }

bool Tensor::is_contiguous(MemoryFormat format) const {
  DEMI_CHECK(format != MemoryFormat::Preserve, "is_contiguous: preserve_format is not a memory format a tensor "
             "is stored in; ask for Contiguous or ChannelsLast");
  if (format == MemoryFormat::ChannelsLast && dim() != 4) return false;
  return format == impl_ref().memory_format || !channels_last_differs(shape());
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  DEMI_CHECK(format != MemoryFormat::Preserve, "contiguous: preserve_format keeps the format it is given; ask for "
             "MemoryFormat::Contiguous or MemoryFormat::ChannelsLast");
  DEMI_CHECK(format != MemoryFormat::ChannelsLast || dim() == 4, "contiguous(ChannelsLast): needs a 4-D tensor "
             "[N, C, H, W], got shape ", shape());
  if (is_contiguous(format)) return *this;
  return ops::to_memory_format(*this, format);
}

Tensor Tensor::to(DType dtype) const { return dtype == this->dtype() ? *this : ops::cast(*this, dtype); }
Tensor Tensor::to(const Device& device) const {
  return device == this->device() ? *this : ops::to_device(*this, device);
}

Tensor Tensor::reshape(Shape new_shape) const {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1) {
      DEMI_CHECK(infer < 0, "reshape: at most one -1 extent allowed, got ", new_shape);
      infer = static_cast<int64_t>(i);
    } else {
      DEMI_CHECK(new_shape[i] >= 0, "reshape: negative extent in ", new_shape);
      known *= new_shape[i];
    }
  }
  if (infer >= 0) {
    DEMI_CHECK(known > 0 && numel() % known == 0, "reshape: cannot infer -1 in ", new_shape,
               " for a tensor of ", numel(), " elements (shape ", shape(), ")");
    new_shape[static_cast<size_t>(infer)] = numel() / known;
  }
  DEMI_CHECK(shape_numel(new_shape) == numel(), "reshape: shape ", new_shape, " holds ",
             shape_numel(new_shape), " elements but the tensor of shape ", shape(), " has ", numel());
  if (new_shape == shape()) return *this;
  return ops::reshape(*this, new_shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  const int64_t n = dim();
  if (n == 0) return reshape({1});
  if (start_dim < 0) start_dim += n;
  if (end_dim < 0) end_dim += n;
  DEMI_CHECK(start_dim >= 0 && start_dim < n && end_dim >= start_dim && end_dim < n,
             "flatten: dims [", start_dim, ", ", end_dim, "] out of range for shape ", shape());
  Shape out;
  for (int64_t i = 0; i < start_dim; ++i) out.push_back(shape()[i]);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) merged *= shape()[i];
  out.push_back(merged);
  for (int64_t i = end_dim + 1; i < n; ++i) out.push_back(shape()[i]);
  return reshape(out);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  DEMI_CHECK(dim() >= 1, "slice: needs at least one dimension, got a 0-d tensor");
  const int64_t rows = shape()[0];
  DEMI_CHECK(0 <= begin && begin <= end && end <= rows, "slice: rows [", begin, ", ", end,
             ") out of range for dim 0 of extent ", rows, " (shape ", shape(), ")");
  const TensorImpl& self = impl_ref();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = self.storage;
  impl->shape = self.shape;
  impl->shape[0] = end - begin;
  impl->dtype = self.dtype;
  impl->memory_format = self.memory_format;  // N is outermost in both formats
  impl->offset = self.offset + static_cast<size_t>(begin * (numel() / std::max<int64_t>(rows, 1))) * dtype_size(self.dtype);
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  Tensor out = empty_like(*this);
  kernels(*this).copy(data_ptr(), out.data_ptr(), nbytes());
  return out;
}

Tensor Tensor::detach() const {
  const TensorImpl& self = impl_ref();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = self.storage;
  impl->offset = self.offset;
  impl->shape = self.shape;
  impl->dtype = self.dtype;
  impl->memory_format = self.memory_format;
  return Tensor(std::move(impl));
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  TensorImpl& impl = impl_ref();
  DEMI_CHECK(impl.grad_fn == nullptr || requires_grad,
             "requires_grad_(false): the tensor is the result of a recorded op; use detach()");
  DEMI_CHECK(!requires_grad || is_floating(impl.dtype), "requires_grad_: only floating tensors can "
             "require gradients, this one is ", impl.dtype);
  impl.requires_grad = requires_grad;
  return *this;
}
bool Tensor::requires_grad() const { return impl_ref().requires_grad; }
bool Tensor::is_leaf() const { return impl_ref().grad_fn == nullptr; }

int Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  TensorImpl& impl = impl_ref();
  DEMI_CHECK(impl.requires_grad && impl.grad_fn == nullptr, "register_post_accumulate_grad_hook: only a leaf "
             "that requires grad accumulates a gradient; this tensor ", impl.grad_fn ? "is an op's result" :
             "does not require grad");
  static int next_handle = 0;
  const int handle = ++next_handle;
  impl.post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(int handle) const {
  auto& hooks = impl_ref().post_accumulate_grad_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == handle) {
      hooks.erase(it);
      return;
    }
  }
}
Tensor Tensor::grad() const { return impl_ref().grad; }
void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    DEMI_CHECK(grad.shape() == shape() && grad.device() == device(), "set_grad: gradient of shape ",
               grad.shape(), " on ", grad.device(), " does not match the tensor's ", shape(), " on ", device());
  }
  impl_ref().grad = grad;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return impl_ref().grad_fn; }

void Tensor::backward(const Tensor& grad_output) const { autograd::run_backward(*this, grad_output); }

void Tensor::copy_to_host_as(DType dtype, void* out) const {
  NoGradGuard no_grad;
  // A device tensor's copy to the host counts itself (the backend's copy_to_host); a CPU one's
  // read is counted here, as the same read would be on a GPU.
  if (device().is_cpu()) backend::note_host_read("item() / to_vector()");
  Tensor host = to(Device::cpu()).to(dtype).contiguous();  // the values in the shape's order
  if (host.nbytes() == 0) return;  // out may be null then (an empty vector's data()), which memcpy may not take
  std::memcpy(out, host.data_ptr(), host.nbytes());
}

Tensor empty(const Shape& shape, DType dtype, const Device& device, MemoryFormat format) {
  for (int64_t d : shape) DEMI_CHECK(d >= 0, "empty: negative extent in shape ", shape);
  DEMI_CHECK(format != MemoryFormat::ChannelsLast || shape.size() == 4, "empty: channels_last needs a 4-D shape "
             "[N, C, H, W], got ", shape);
  DEMI_CHECK(format != MemoryFormat::Preserve, "empty: preserve_format needs a tensor to preserve; use empty_like");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  if (channels_last_differs(shape)) impl->memory_format = format;
  impl->storage = std::make_shared<Storage>(device, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  return Tensor(std::move(impl));
}
Tensor empty_like(const Tensor& like) { return empty_like(like, like.dtype()); }
Tensor empty_like(const Tensor& like, DType dtype) {
  return empty(like.shape(), dtype, like.device(), like.suggest_memory_format());
}

}  // namespace demi

// Tensor factories. Values are staged on the host in their natural type and converted by the
// backend's cast kernel, so every dtype rounds the same way (round to nearest even).
#include "framework/tensor/factories.h"

#include <cmath>
#include <cstring>

namespace demi {
namespace {

template <typename T>
Tensor from_host(const std::vector<T>& values, const Shape& shape, DType dtype, const Device& device) {
  DEMI_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "tensor: ", values.size(),
             " values do not fill shape ", shape, " (", shape_numel(shape), " elements)");
  Tensor host = empty(shape, DTypeOf<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  Tensor out = host.to(dtype);
  return out.to(device);
}

}  // namespace

Tensor tensor(const std::vector<float>& values, const Shape& shape, DType dtype, const Device& device) {
  return from_host(values, shape, dtype, device);
}
Tensor tensor(std::initializer_list<float> values, const Shape& shape, DType dtype, const Device& device) {
  return from_host(std::vector<float>(values), shape, dtype, device);
}
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype, const Device& device) {
  return from_host(values, shape, dtype, device);
}
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, DType dtype, const Device& device) {
  return from_host(values, shape, dtype, device);
}

Tensor full(const Shape& shape, double value, DType dtype, const Device& device) {
  Tensor out = empty(shape, dtype, device);
  kernels(out).fill(out.ref(), value);
  return out;
}
Tensor zeros(const Shape& shape, DType dtype, const Device& device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, const Device& device) { return full(shape, 1.0, dtype, device); }
namespace {
Tensor full_like(const Tensor& like, double value) {
  Tensor out = empty_like(like);  // like's memory format too
  kernels(out).fill(out.storage_ref(), value);
  return out;
}
}  // namespace
Tensor zeros_like(const Tensor& like) { return full_like(like, 0.0); }
Tensor ones_like(const Tensor& like) { return full_like(like, 1.0); }

Tensor arange(double start, double end, double step, DType dtype, const Device& device) {
  DEMI_CHECK(step != 0.0, "arange: step must be nonzero");
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return from_host(values, {n}, dtype, device);
}

namespace {
Tensor random_tensor(backend::RandomKind kind, const Shape& shape, Generator& gen, DType dtype,
                     const Device& device) {
  DEMI_CHECK(is_floating(dtype), "rand/randn: dtype must be floating, got ", dtype);
  Tensor out = empty(shape, dtype, device);
  backend::RandomArgs args;
  args.kind = kind;
  args.output = out.ref();
  args.seed = gen.seed();
  args.offset = gen.advance(static_cast<uint64_t>(out.numel()));
  kernels(out).random(args);
  return out;
}
}  // namespace

Tensor randn(const Shape& shape, Generator& gen, DType dtype, const Device& device) {
  return random_tensor(backend::RandomKind::Normal, shape, gen, dtype, device);
}
Tensor rand(const Shape& shape, Generator& gen, DType dtype, const Device& device) {
  return random_tensor(backend::RandomKind::Uniform, shape, gen, dtype, device);
}
Tensor randn(const Shape& shape, DType dtype, const Device& device) {
  return randn(shape, default_generator(), dtype, device);
}
Tensor rand(const Shape& shape, DType dtype, const Device& device) {
  return rand(shape, default_generator(), dtype, device);
}

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  DEMI_CHECK(is_floating(t.dtype()), "uniform_: tensor must be floating, got ", t.dtype());
  backend::RandomArgs args;
  args.kind = backend::RandomKind::Uniform;
  args.output = t.storage_ref();  // in storage order, as PyTorch fills a channels_last tensor
  args.a = low;
  args.b = high;
  args.seed = gen.seed();
  args.offset = gen.advance(static_cast<uint64_t>(t.numel()));
  kernels(t).random(args);
}

}  // namespace demi

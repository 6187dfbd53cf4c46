// Tensor factories: from values, constants, ranges and random draws.
#pragma once

#include <initializer_list>
#include <vector>

#include "framework/tensor/generator.h"
#include "framework/tensor/tensor.h"

namespace demi {

// A tensor holding `values` (row-major) with `shape`, converted to `dtype` on `device`.
Tensor tensor(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
              const Device& device = Device::cpu());
// Braced values ({1, 2, 3}) are floats, as torch.tensor([1, 2, 3.]) is float32.
Tensor tensor(std::initializer_list<float> values, const Shape& shape, DType dtype = DType::F32,
              const Device& device = Device::cpu());
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F64,
              const Device& device = Device::cpu());
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::I64,
              const Device& device = Device::cpu());

Tensor full(const Shape& shape, double value, DType dtype = DType::F32, const Device& device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::F32, const Device& device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, const Device& device = Device::cpu());
// Shape, dtype, device and memory format of `like`.
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
// [start, start + step, ...) below end, as torch.arange.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32,
              const Device& device = Device::cpu());

// N(0, 1) and U[0, 1) draws from `gen` (or the default generator).
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32, const Device& device = Device::cpu());
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32, const Device& device = Device::cpu());
Tensor randn(const Shape& shape, DType dtype = DType::F32, const Device& device = Device::cpu());
Tensor rand(const Shape& shape, DType dtype = DType::F32, const Device& device = Device::cpu());
// U[low, high) draws into an existing floating tensor, in place (module initialisation).
void uniform_(const Tensor& t, double low, double high, Generator& gen);

}  // namespace demi

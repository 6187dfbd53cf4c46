// CPU memory: 64-byte aligned host allocations (one AVX-512 line) and memcpy. The caching
// allocator in framework/tensor/allocator.cpp sits on top, so these run only on a cache miss.
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"

namespace demi::backend::cpu {

void* CpuKernels::raw_allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  DEMI_CHECK(ptr != nullptr, "CPU allocator: out of memory allocating ", bytes,
             " bytes; reduce the batch size or free tensors");
  return ptr;
}

void CpuKernels::raw_free(void* ptr) { std::free(ptr); }

void CpuKernels::copy_from_host(const void* host_src, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
void CpuKernels::copy_to_host(const void* src, void* host_dst, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void CpuKernels::copy(const void* src, void* dst, size_t bytes) {
  if (bytes && src != dst) std::memmove(dst, src, bytes);
}

}  // namespace demi::backend::cpu

// Maps a Device to its Kernels: the CPU backend always; CUDA devices through the CUDA backend when
// demi was built with it, else a demi::Error that says how to get one.
#include <omp.h>

#include <atomic>

#include "backends/cpu/cpu_kernels.h"
#include "backends/kernels.h"

#ifdef DEMI_WITH_CUDA
#include "backends/cuda/cuda_registry.h"
#endif

namespace demi::backend {

Kernels& kernels_for(const Device& device) {
  if (device.is_cpu()) {
    static cpu::CpuKernels cpu_kernels;
    return cpu_kernels;
  }
#ifdef DEMI_WITH_CUDA
  return cuda::kernels_for_device(device.index());
#else
  DEMI_THROW("Device ", device,
             " requested, but demi was built without the CUDA backend (nvcc not found or DEMI_CUDA=OFF); "
             "use Device::cpu() or rebuild with the CUDA toolkit and -DDEMI_CUDA=ON");
#endif
}

int cuda_device_count() {
#ifdef DEMI_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

namespace {
std::atomic<bool> tf32_allowed{false};
}  // namespace
void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

void set_cpu_threads(int n) {
  DEMI_CHECK(n >= 1, "set_cpu_threads: need at least 1 thread, got ", n);
  omp_set_num_threads(n);
}
int cpu_threads() { return omp_get_max_threads(); }

}  // namespace demi::backend

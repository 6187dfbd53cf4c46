// The CUDA backend's entry points for backends/registry.cpp. Plain C++: includes no CUDA header, so
// the registry (and anything above it) compiles without nvcc's include paths.
#pragma once

#include "backends/kernels.h"

namespace demi::backend::cuda {

// The kernels of CUDA device `index`, created on first use. Throws demi::Error naming cuda:<index>
// and the reason (no CUDA driver, no device, index out of range) when the device is unusable.
Kernels& kernels_for_device(int index);

// Number of CUDA devices usable now; 0 when there is no driver or no device (never throws).
int device_count();

}  // namespace demi::backend::cuda

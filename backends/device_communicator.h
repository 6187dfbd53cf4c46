// Collectives on a device's own memory (NCCL on CUDA) behind a backend-neutral face, so that
// framework/dist names no backend: the CUDA backend defines these when it is built with NCCL.
// Collectives run on the device's one stream, ordered with the kernels before and after them.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "framework/core/device.h"
#include "framework/core/dtype.h"

namespace demi::backend {

// What every rank needs to join one communicator (NCCL's unique id, 128 bytes): made by rank 0,
// passed to the others by the bootstrap process group.
using CommunicatorId = std::array<char, 128>;

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  // In place and enqueued on the device's stream; `data` is device memory of `count` elements.
  virtual void all_reduce(void* data, size_t count, DType dtype, bool max) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
};

// For a device that has a collective library (CUDA with NCCL); a clear error for any other.
CommunicatorId new_communicator_id(const Device& device);
std::unique_ptr<DeviceCommunicator> make_device_communicator(const Device& device, int rank, int size,
                                                             const CommunicatorId& id);

}  // namespace demi::backend

// NCCL for dist's process group, behind a plain-C++ face (like cuda_registry.h): nothing above
// backends/ includes nccl.h or a CUDA header. Collectives run on the device's one stream, so they
// are ordered with the kernels before and after them without events (and do not overlap them).
#pragma once

#include <array>
#include <cstddef>

#include "framework/core/dtype.h"

namespace demi::backend::cuda {

using NcclUniqueId = std::array<char, 128>;  // NCCL_UNIQUE_ID_BYTES

// ncclGetUniqueId: made by rank 0, passed to every rank by the bootstrap (MPI).
NcclUniqueId nccl_unique_id();

class NcclCommunicator {
 public:
  NcclCommunicator(int device, int rank, int size, const NcclUniqueId& id);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // In place, enqueued on the device's stream. `data` is device memory of `count` elements.
  void all_reduce(void* data, size_t count, DType dtype, bool max);
  void broadcast(void* data, size_t count, DType dtype, int root);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int device_ = 0;
};

}  // namespace demi::backend::cuda

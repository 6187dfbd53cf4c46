// NCCL for dist's process group: the CUDA backend's DeviceCommunicator (backends/device_communicator.h
// is its face above backends/). Collectives run on the device's one stream, so they are ordered with
// the kernels before and after them without events (and do not overlap them).
#pragma once

#include "backends/device_communicator.h"

namespace demi::backend::cuda {

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(int device, int rank, int size, const CommunicatorId& id);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // In place, enqueued on the device's stream. `data` is device memory of `count` elements.
  void all_reduce(void* data, size_t count, DType dtype, bool max) override;
  void broadcast(void* data, size_t count, DType dtype, int root) override;

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int device_ = 0;
};

}  // namespace demi::backend::cuda

// NcclCommunicator: one ncclComm_t per process and device, every call checked (the statement,
// NCCL's status string and its last error in the message).
#include <nccl.h>

#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_registry.h"
#include "backends/cuda/nccl_communicator.h"

#define DEMI_NCCL_CHECK(stmt)                                                                   \
  do {                                                                                          \
    const ncclResult_t demi_status_ = (stmt);                                                   \
    if (demi_status_ != ncclSuccess)                                                            \
      ::demi::detail::throw_error(__FILE__, __LINE__, "NCCL error: ", #stmt, " failed with ",   \
                                  ncclGetErrorString(demi_status_), " (", ncclGetLastError(nullptr), ")"); \
  } while (0)

namespace demi::backend::cuda {

namespace {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::I64: return ncclInt64;
    default: break;
  }
  DEMI_CHECK(false, "process group (nccl): dtype ", dtype, " is not supported; use float32, float16, bfloat16, "
             "float64 or int64");
  return ncclFloat32;
}

cudaStream_t stream_of(int device) { return static_cast<CudaKernels&>(kernels_for_device(device)).stream(); }

}  // namespace

NcclCommunicator::NcclCommunicator(int device, int rank, int size, const CommunicatorId& id) : device_(device) {
  kernels_for_device(device);  // a clear error when the device is unusable
  DeviceGuard guard(device);
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), sizeof(nccl_id));
  ncclComm_t comm = nullptr;
  DEMI_NCCL_CHECK(ncclCommInitRank(&comm, size, nccl_id, rank));
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) (void)ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclCommunicator::all_reduce(void* data, size_t count, DType dtype, bool max) {
  DeviceGuard guard(device_);
  DEMI_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_dtype(dtype), max ? ncclMax : ncclSum,
                                static_cast<ncclComm_t>(comm_), stream_of(device_)));
}

void NcclCommunicator::broadcast(void* data, size_t count, DType dtype, int root) {
  DeviceGuard guard(device_);
  DEMI_NCCL_CHECK(ncclBroadcast(data, data, count, nccl_dtype(dtype), root, static_cast<ncclComm_t>(comm_),
                                stream_of(device_)));
}

}  // namespace demi::backend::cuda

namespace demi::backend {

namespace {
void check_cuda(const Device& device) {
  DEMI_CHECK(device.is_cuda(), "process group (nccl): needs a CUDA device, got ", device,
             "; CPU tensors go through init_process_group(\"mpi\")");
}
}  // namespace

CommunicatorId new_communicator_id(const Device& device) {
  check_cuda(device);
  static_assert(sizeof(ncclUniqueId) == sizeof(CommunicatorId), "NCCL_UNIQUE_ID_BYTES changed");
  ncclUniqueId id;
  DEMI_NCCL_CHECK(ncclGetUniqueId(&id));
  CommunicatorId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<DeviceCommunicator> make_device_communicator(const Device& device, int rank, int size,
                                                             const CommunicatorId& id) {
  check_cuda(device);
  return std::make_unique<cuda::NcclCommunicator>(device.index(), rank, size, id);
}

}  // namespace demi::backend

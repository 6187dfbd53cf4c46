// The NCCL process group: CUDA tensors, one process per GPU. The unique id travels from rank 0
// over the MPI group that the launcher started. Collectives are stream-ordered: wait() has nothing
// to wait for on the host, since every later kernel of the device runs after them.
#include <cstring>

#include "backends/device_communicator.h"
#include "framework/dist/detail.h"
#include "framework/tensor/factories.h"

namespace demi::dist::detail {

namespace {

class StreamOrdered final : public Work {
 public:
  void wait() override {}
};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(const Device& device, ProcessGroup& bootstrap)
      : device_(device), rank_(bootstrap.rank()), size_(bootstrap.size()) {
    backend::CommunicatorId id{};
    if (rank_ == 0) id = backend::new_communicator_id(device);
    const Tensor bytes = empty({static_cast<int64_t>(id.size() / sizeof(int64_t))}, DType::I64);  // 128 bytes
    std::memcpy(bytes.data_ptr(), id.data(), id.size());
    bootstrap.broadcast(bytes, 0);
    std::memcpy(id.data(), bytes.data_ptr(), id.size());
    comm_ = backend::make_device_communicator(device, rank_, size_, id);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    comm_->all_reduce(t.data_ptr(), static_cast<size_t>(t.numel()), t.dtype(), op == ReduceOp::Max);
    return std::make_shared<StreamOrdered>();
  }
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    DEMI_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of this group of ", size_);
    comm_->broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), t.dtype(), root);
    return std::make_shared<StreamOrdered>();
  }
  void barrier() override {
    const Tensor one = full({1}, 1.0, DType::F32, device_);
    all_reduce(one);
    (void)one.item<float>();  // a host read: every rank has reached the all-reduce
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    DEMI_CHECK(t.defined(), op, ": the tensor is undefined");
    DEMI_CHECK(t.device() == device_, op, ": the nccl process group of ", device_, " got a tensor on ", t.device(),
               "; move it there first (CPU tensors go through init_process_group(\"mpi\"))");
  }

  Device device_;
  int rank_, size_;
  std::unique_ptr<backend::DeviceCommunicator> comm_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(const Device& device, ProcessGroup& bootstrap) {
  return std::make_shared<ProcessGroupNccl>(device, bootstrap);
}

}  // namespace demi::dist::detail

// dist::ProcessGroup: the collectives data-parallel training needs (all_reduce, broadcast,
// barrier) over an engine the field already trusts: MPI for CPU tensors, NCCL for CUDA tensors.
// Every rank must call the same collectives in the same order, as with torch.distributed.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "framework/tensor/tensor.h"

namespace demi::dist {

enum class ReduceOp { Sum, Max };

// A collective in flight. wait() blocks until it is done and rethrows its error.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"

  // In place on every rank: t becomes the reduction of all ranks' t. F32, F16, BF16, F64 and I64
  // (half types are summed in fp32 and rounded once per step of the reduction, as NCCL does).
  // The tensor must stay alive and untouched until the returned work has finished.
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  // In place: every rank's t becomes root's t.
  virtual std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  void broadcast(const Tensor& t, int root = 0) { broadcast_async(t, root)->wait(); }
};

// Where this process sits, read from the launcher's environment: mpirun's OMPI_COMM_WORLD_RANK /
// OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_RANK, PMI_RANK / PMI_SIZE (MPICH), or
// torchrun-style RANK / WORLD_SIZE / LOCAL_RANK. A process started alone is rank 0 of 1.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher;  // "mpirun", "pmi", "torchrun" or "none"
};
LaunchInfo launch_info();

// Whether this build has each engine.
bool mpi_available();
bool nccl_available();

// The world's process group: "mpi" (CPU tensors), "nccl" (CUDA tensors; bootstrapped through
// MPI, so it needs an MPI launcher too) or "auto" (nccl when the device is CUDA, else mpi).
// Throws demi::Error naming what is missing when the engine was not built in or not launched.
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend = "auto",
                                                 const Device& device = Device::cpu());

// Ends every process of the job now (MPI_Abort): after an error on one rank, so that the others do
// not wait forever in a collective. Does nothing when MPI is not running.
void abort_job(int exit_code);

// GradScaler::Options::reduce_found_inf for a data-parallel run: all-reduces found_inf (max) over
// `group`, so that one rank's inf skips every rank's step (nothing to do for a group of one).
std::function<void(const Tensor& found_inf)> found_inf_reduction(std::shared_ptr<ProcessGroup> group);

}  // namespace demi::dist

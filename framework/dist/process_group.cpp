// The launcher's environment and the choice of engine; the engines are in mpi/ and nccl/.
#include "framework/dist/process_group.h"

#include <cstdlib>

#include "framework/dist/detail.h"

namespace demi::dist {

namespace {

// The integer value of environment variable `name`, or nullopt-like -1 when unset.
int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return -1;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  DEMI_CHECK(end && *end == '\0' && v >= 0 && v < (1 << 24), "environment variable ", name, "='", value,
             "' is not a non-negative integer; it is set by the launcher (mpirun, torchrun)");
  return static_cast<int>(v);
}

}  // namespace

LaunchInfo launch_info() {
  struct Names {
    const char *rank, *size, *local_rank, *launcher;
  };
  for (const Names& n : {Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
                         Names{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "pmi"},
                         Names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"}}) {
    const int rank = env_int(n.rank), size = env_int(n.size);
    if (rank < 0 || size < 0) continue;
    DEMI_CHECK(size >= 1 && rank < size, n.rank, "=", rank, " and ", n.size, "=", size,
               " do not describe a rank of the job; check the launcher's environment");
    const int local = env_int(n.local_rank);
    return {rank, size, local < 0 ? 0 : local, n.launcher};
  }
  return {0, 1, 0, "none"};
}

bool mpi_available() {
#ifdef DEMI_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool nccl_available() {
#ifdef DEMI_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const Device& device) {
  const std::string chosen = backend == "auto" ? (device.kind() == Device::Kind::CUDA ? "nccl" : "mpi") : backend;
  DEMI_CHECK(chosen == "mpi" || chosen == "nccl", "init_process_group: backend '", backend,
             "' is not one of auto, mpi, nccl");
  DEMI_CHECK(mpi_available(), "init_process_group(\"", chosen, "\"): this build of demi has no MPI (",
             chosen == "nccl" ? "NCCL is bootstrapped through it; " : "",
             "install libopenmpi-dev and openmpi-bin, then reconfigure)");
#ifdef DEMI_WITH_MPI
  if (chosen == "mpi") return detail::make_mpi_process_group();
  DEMI_CHECK(device.kind() == Device::Kind::CUDA, "init_process_group(\"nccl\"): NCCL reduces CUDA tensors; the "
             "device is ", device, ": use backend \"mpi\" for the CPU");
  DEMI_CHECK(nccl_available(), "init_process_group(\"nccl\"): this build of demi has no NCCL (it needs the CUDA "
             "toolkit with NCCL at configure time)");
#ifdef DEMI_WITH_NCCL
  static std::shared_ptr<ProcessGroup> bootstrap;  // MPI stays up while NCCL lives: it started the job
  if (!bootstrap) bootstrap = detail::make_mpi_process_group();
  return detail::make_nccl_process_group(device, *bootstrap);
#endif
#endif
  return nullptr;
}

void abort_job(int exit_code) {
#ifdef DEMI_WITH_MPI
  detail::mpi_abort(exit_code);
#else
  (void)exit_code;
#endif
}

std::function<void(const Tensor& found_inf)> found_inf_reduction(std::shared_ptr<ProcessGroup> group) {
  DEMI_CHECK(group != nullptr, "found_inf_reduction: the process group is null");
  return [group](const Tensor& found_inf) {
    if (group->size() > 1) group->all_reduce(found_inf, ReduceOp::Max);
  };
}

}  // namespace demi::dist

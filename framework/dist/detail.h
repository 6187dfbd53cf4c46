// What process_group.cpp needs from the engines built in (framework/dist/mpi/, nccl/); each
// exists only when its engine was found at configure time (DEMI_WITH_MPI, DEMI_WITH_NCCL).
#pragma once

#include <memory>

#include "framework/dist/process_group.h"

namespace demi::dist::detail {

std::shared_ptr<ProcessGroup> make_mpi_process_group();
void mpi_abort(int exit_code);
// The world group over NCCL on `device`, its unique id shared through `bootstrap`.
std::shared_ptr<ProcessGroup> make_nccl_process_group(const Device& device, ProcessGroup& bootstrap);

}  // namespace demi::dist::detail

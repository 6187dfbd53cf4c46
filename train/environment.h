// Where a run happens: the compute dtype, the device, the process group of a data-parallel run
// and this process's rank in it, and the stream it prints to (rank 0's std::cout; the other ranks
// print nowhere). Built once, first, by every entry point that trains or evaluates.
#pragma once

#include <atomic>
#include <iostream>
#include <memory>
#include <ostream>

#include "framework/core/device.h"
#include "framework/core/dtype.h"
#include "framework/dist/process_group.h"
#include "train/config.h"

namespace demi::train {

// Set by train_cifar's SIGINT/SIGTERM handler: the loop stops after the current step, checkpoints
// and returns (in a data-parallel run, after the ranks agree).
extern std::atomic<bool> g_stop_requested;

struct Environment {
  DType dtype = DType::F32;  // autocast's dtype; F32: no autocast
  Device device = Device::cpu();
  std::shared_ptr<dist::ProcessGroup> group;  // null: a single process
  int rank = 0;
  int world = 1;
  std::ostream* out = &std::cout;  // where this rank prints
  bool main_rank() const { return rank == 0; }
};

// Sets the thread count, joins the process group when a launcher (mpirun, torchrun) started
// several processes (each on its own GPU), and checks that --batch-size divides among them.
Environment make_environment(const TrainerConfig& c);

}  // namespace demi::train

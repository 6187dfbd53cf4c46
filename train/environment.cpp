// The run's environment: threads, device, process group, rank and output stream.
#include "train/environment.h"

#include <iostream>
#include <string>

#include "framework/core/error.h"
#include "framework/demi/demi.h"

namespace demi::train {

std::atomic<bool> g_stop_requested{false};

namespace {

// Where the ranks other than 0 print: nowhere.
std::ostream& null_stream() {
  static std::ostream null(nullptr);
  return null;
}

}  // namespace

Environment make_environment(const TrainerConfig& c) {
  Environment env;
  env.dtype = compute_dtype(c.precision);
  if (c.threads > 0) set_num_threads(c.threads);
  // Data parallel: each rank trains on its shard of every batch; rank 0 alone prints, logs and
  // checkpoints.
  const dist::LaunchInfo launch = dist::launch_info();
  env.device = c.device;
  if (launch.world_size > 1 && env.device.kind() == Device::Kind::CUDA) env.device = Device::cuda(launch.local_rank);
  if (launch.world_size > 1) env.group = dist::init_process_group("auto", env.device);
  env.rank = env.group ? env.group->rank() : 0;
  env.world = env.group ? env.group->size() : 1;
  const int64_t world = env.world;
  DEMI_CHECK(c.batch_size % (world * c.accum) == 0, "--batch-size ", c.batch_size,
             " is the global batch: it must divide evenly among ", world, " processes",
             c.accum > 1 ? " times --accum " : "", c.accum > 1 ? std::to_string(c.accum) : "",
             "; pick a multiple of ", world * c.accum);
  env.out = env.main_rank() ? &std::cout : &null_stream();
  return env;
}

}  // namespace demi::train

// The umbrella header: #include <demi/demi.h> gives the whole public API.
#pragma once

#include "framework/amp/autocast.h"
#include "framework/amp/category.h"
#include "framework/amp/grad_scaler.h"
#include "framework/amp/train_step.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/autograd/profiler.h"
#include "framework/core/device.h"
#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/half.h"
#include "framework/core/shape.h"
#include "framework/core/warning.h"
#include "framework/dist/distributed_data_parallel.h"
#include "framework/dist/process_group.h"
#include "framework/dist/sync_batch_norm.h"
#include "framework/nn/activation.h"
#include "framework/nn/batch_norm2d.h"
#include "framework/nn/clip_grad.h"
#include "framework/nn/functional.h"
#include "framework/nn/conv2d.h"
#include "framework/nn/init.h"
#include "framework/nn/linear.h"
#include "framework/nn/module.h"
#include "framework/nn/pooling.h"
#include "framework/nn/sequential.h"
#include "framework/ops/ops.h"
#include "framework/optim/adamw.h"
#include "framework/optim/lookahead.h"
#include "framework/optim/lr_scheduler.h"
#include "framework/optim/muon.h"
#include "framework/optim/optimizer.h"
#include "framework/optim/sgd.h"
#include "framework/serialize/safetensors.h"
#include "framework/serialize/save.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/factories.h"
#include "framework/tensor/generator.h"
#include "framework/tensor/state_dict.h"
#include "framework/tensor/tensor.h"

namespace demi {
// Threads the CPU backend uses (default: all cores).
inline void set_num_threads(int n) { backend::set_cpu_threads(n); }
inline int get_num_threads() { return backend::cpu_threads(); }
}  // namespace demi

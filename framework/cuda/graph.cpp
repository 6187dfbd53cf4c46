// CUDAGraph: the allocator's private pool around the backend's stream capture.
#include "framework/cuda/graph.h"

#include "framework/core/error.h"
#include "framework/tensor/allocator.h"

namespace demi::cuda {

CUDAGraph::~CUDAGraph() {
  try {
    reset();
  } catch (...) {  // a destructor must not throw; the process keeps the memory then
  }
}

void CUDAGraph::capture_begin(const Device& device) {
  DEMI_CHECK(!capturing_ && !graph_, "CUDAGraph::capture_begin: this graph already ",
             capturing_ ? "is capturing" : "holds a recording", "; call reset() first");
  backend::Kernels& kernels = backend::kernels_for(device);
  device_ = device;
  pool_ = detail::create_pool(device);
  random_before_ = default_generator(device).state();
  detail::begin_pool(device, pool_);
  try {
    kernels.capture_begin();
  } catch (...) {
    detail::end_pool(device);
    detail::release_pool(device, pool_);
    pool_ = 0;
    throw;
  }
  capturing_ = true;
}

void CUDAGraph::capture_end() {
  DEMI_CHECK(capturing_, "CUDAGraph::capture_end: no capture in progress; call capture_begin first");
  backend::Kernels& kernels = backend::kernels_for(device_);
  capturing_ = false;
  detail::end_pool(device_);
  const bool drew = default_generator(device_).state() != random_before_;
  if (drew) {
    kernels.abort_capture();
    default_generator(device_).set_state(random_before_);
    DEMI_THROW("CUDAGraph::capture_end: the captured work drew random numbers from ", device_, "'s generator "
               "(dropout?), whose position lives on the host: every replay would draw the same numbers. CUDA graphs "
               "of random ops are not supported yet; capture a step without dropout or run it eagerly");
  }
  graph_ = kernels.capture_end();  // throws, leaving graph_ empty, when the capture failed
}

void CUDAGraph::replay() {
  DEMI_CHECK(graph_, "CUDAGraph::replay: nothing recorded", capturing_ ? " yet (call capture_end first)" : "");
  backend::kernels_for(device_).replay(*graph_);
}

void CUDAGraph::reset() {
  if (capturing_) {
    backend::kernels_for(device_).abort_capture();
    detail::end_pool(device_);
    capturing_ = false;
  }
  graph_.reset();
  if (pool_ != 0) detail::release_pool(device_, pool_);
  pool_ = 0;
}

}  // namespace demi::cuda

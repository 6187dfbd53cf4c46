// cuda::CUDAGraph: torch.cuda.CUDAGraph. Records the kernels this thread launches on a CUDA device
// between capture_begin() and capture_end(), without running them, and replay() runs the recording
// with one launch: no per-kernel launch cost, no host work. A replay reads and writes exactly the
// memory the capture used, so:
// - inputs are "static": fill the tensors the captured code read (copy_) before each replay;
// - outputs are overwritten by each replay: clone what must outlive the next one;
// - memory allocated during the capture comes from the graph's private pool (allocator.h) and is
//   never handed to other tensors while the graph lives; reset() or the destructor gives it back;
// - a host-side value (a scalar argument, a learning rate held on the host, a random seed) is
//   frozen at its captured value. Random draws (dropout) are refused at capture_end.
// Capture only a warmed-up step: the first run of a shape may synchronise (library plans, scratch
// growth), and what cannot be recorded throws an error naming it. training::TrainStep's cuda_graph
// option does all of this for a training step.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/kernels.h"
#include "framework/core/device.h"
#include "framework/tensor/generator.h"

namespace demi::cuda {

class CUDAGraph {
 public:
  CUDAGraph() = default;
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Starts recording `device`'s kernels launched by this thread. Throws on a device without
  // graphs (the CPU) and when this graph already holds a recording (reset() first).
  void capture_begin(const Device& device);
  // Ends the recording and makes it replayable. If the capture failed (an operation that cannot be
  // recorded, random numbers drawn) it throws and the graph is left empty.
  void capture_end();
  // Runs the recording once, in stream order after whatever was launched before.
  void replay();
  // Drops the recording (ending a capture left open by an error) and gives back its pool.
  void reset();
  bool has_graph() const { return graph_ != nullptr; }
  bool capturing() const { return capturing_; }
  const Device& device() const { return device_; }

 private:
  Device device_ = Device::cpu();
  uint64_t pool_ = 0;  // the allocator's private pool (0: none)
  std::unique_ptr<backend::Kernels::Graph> graph_;
  bool capturing_ = false;
  GeneratorState random_before_;  // the device generator at capture_begin
};

}  // namespace demi::cuda

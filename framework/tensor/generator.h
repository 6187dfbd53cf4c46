// Generator: a seed and a running offset into the counter-based (Philox) random stream, so a draw
// depends only on (seed, offset) and never on the thread count or the device.
#pragma once

#include <cstdint>

#include "framework/core/device.h"

namespace demi {

// Everything a generator's future draws depend on: save it, draw, restore it, and the same numbers
// come again (activation checkpointing reruns a forward so).
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const GeneratorState& o) const { return seed == o.seed && offset == o.offset; }
  bool operator!=(const GeneratorState& o) const { return !(*this == o); }
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Reserves `n` draws and returns the offset of the first.
  uint64_t advance(uint64_t n) {
    const uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  GeneratorState state() const { return {seed_, offset_}; }
  void set_state(const GeneratorState& state) {
    seed_ = state.seed;
    offset_ = state.offset;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator used where none is passed (module initialisation, factories without one): the
// CPU's, as PyTorch's torch.default_generator.
Generator& default_generator();
// The default generator of a device, as PyTorch keeps one for the CPU and one per CUDA device:
// dropout on a tensor draws from its device's. default_generator(Device::cpu()) is
// default_generator(). A CUDA device's is made on first use, seeded by the last manual_seed (0
// before any); asking needs no GPU.
Generator& default_generator(const Device& device);
// Reseeds every default generator, the CPU's and each CUDA device's, and resets their offsets, as
// torch.manual_seed does.
void manual_seed(uint64_t seed);

}  // namespace demi

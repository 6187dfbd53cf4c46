// Generator: a seed and a running offset into the counter-based (Philox) random stream, so a draw
// depends only on (seed, offset) and never on the thread count or the device.
#pragma once

#include <cstdint>

namespace demi {

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

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator used where none is passed (module initialisation, factories without one).
Generator& default_generator();
// Reseeds the default generator, as torch.manual_seed does.
void manual_seed(uint64_t seed);

}  // namespace demi

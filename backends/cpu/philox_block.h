// Philox4x32-10 for kLanes consecutive counters at once, for the CPU kernels that draw (random.cpp,
// dropout.cpp): round by round over the lanes, so the compiler vectorises the 32x32->64 multiplies
// (one counter at a time leaves them scalar). Lane j holds philox::philox4x32_10(first_counter + j,
// seed), the words backends/philox.h defines. Internal to backends/cpu.
#pragma once

#include <cstdint>

#include "backends/philox.h"

namespace demi::backend::cpu {

constexpr int kPhiloxLanes = 64;
struct PhiloxBlock {
  uint32_t x0[kPhiloxLanes], x1[kPhiloxLanes], x2[kPhiloxLanes], x3[kPhiloxLanes];
};

inline void philox4x32_10(uint64_t first_counter, uint64_t seed, PhiloxBlock& r) {
  for (int j = 0; j < kPhiloxLanes; ++j) {
    const uint64_t c = first_counter + static_cast<uint64_t>(j);
    r.x0[j] = static_cast<uint32_t>(c);
    r.x1[j] = static_cast<uint32_t>(c >> 32);
    r.x2[j] = 0;
    r.x3[j] = 0;
  }
  uint32_t k0 = philox::key_lo(seed), k1 = philox::key_hi(seed);
  for (int round = 0; round < philox::kRounds; ++round) {
    for (int j = 0; j < kPhiloxLanes; ++j) philox::philox_round(r.x0[j], r.x1[j], r.x2[j], r.x3[j], k0, k1);
    k0 += philox::kW0;
    k1 += philox::kW1;
  }
}

}  // namespace demi::backend::cpu

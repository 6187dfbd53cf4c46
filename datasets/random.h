// Seed mixing and a counter-free random stream for the data layer (permutations, subsets,
// augmentation): splitmix64 is the same on every platform, unlike std::uniform_int_distribution.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace demi::data::detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A seed for one purpose (an epoch, a batch) derived from a parent seed; distinct tags give
// independent streams.
inline uint64_t derive_seed(uint64_t parent, uint64_t tag) { return splitmix64(parent ^ splitmix64(tag + 0x632be59bd9b4e019ull)); }

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0, without modulo bias (rejects the short last interval).
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

// Fisher-Yates shuffle of `v` in place.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

}  // namespace demi::data::detail

// The default generators: one for the CPU and one per CUDA device, made on first use.
#include "framework/tensor/generator.h"

#include <map>
#include <mutex>

#include "framework/core/error.h"

namespace demi {
namespace {

struct DefaultGenerators {
  std::mutex mutex;  // guards the map and last_seed, not the generators' draws
  uint64_t last_seed = 0;
  Generator cpu{0};
  std::map<int, Generator> cuda;  // by device index; map nodes never move, so references stay valid
};

DefaultGenerators& defaults() {
  static DefaultGenerators d;
  return d;
}

}  // namespace

Generator& default_generator() { return defaults().cpu; }

Generator& default_generator(const Device& device) {
  if (device.is_cpu()) return default_generator();
  DEMI_CHECK(device.index() >= 0, "default_generator: no device ", device, "; CUDA device indices start at 0");
  DefaultGenerators& d = defaults();
  const std::lock_guard<std::mutex> lock(d.mutex);
  return d.cuda.try_emplace(device.index(), d.last_seed).first->second;
}

void manual_seed(uint64_t seed) {
  DefaultGenerators& d = defaults();
  const std::lock_guard<std::mutex> lock(d.mutex);
  d.last_seed = seed;
  d.cpu.manual_seed(seed);
  for (auto& [index, gen] : d.cuda) gen.manual_seed(seed);
}

}  // namespace demi

// Fuzz target: parse_cifar10_binary (one CIFAR-10 batch file) on arbitrary bytes. Every input must
// give a dataset that accounts for every byte, or a demi::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "datasets/cifar10.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const demi::data::Dataset d = demi::data::parse_cifar10_binary(data, size, "fuzz input");
    if (static_cast<size_t>(d.size()) * 3073 != size) std::abort();
    for (int64_t label : d.labels.to_vector<int64_t>())
      if (label < 0 || label >= static_cast<int64_t>(d.classes.size())) std::abort();
  } catch (const demi::Error&) {
  }
  return 0;
}

// Fuzz target: parse_safetensors (checkpoints and any .safetensors a user points us at) on
// arbitrary bytes. Every input must give tensors that lie inside the input, or a demi::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "framework/serialize/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    size_t total = 0;
    for (const auto& [name, t] : demi::parse_safetensors(data, size, "fuzz input")) {
      total += t.nbytes();
      volatile uint8_t sink = 0;  // reads every byte, so ASan checks the whole copy
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    }
    if (total > size) std::abort();
  } catch (const demi::Error&) {
  }
  return 0;
}

// Fuzz target: parse_checkpoint_state, the checkpoint sidecar (state.json) that --resume reads
// before it trusts anything else. Every input must be accepted with every field the trainer reads
// present and well typed, or rejected with a demi::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json s =
        demi::train::parse_checkpoint_state(std::string(reinterpret_cast<const char*>(data), size), "fuzz input");
    // What the trainer reads after a successful parse must not throw anything but demi::Error.
    (void)s.at("model").get<std::string>();
    (void)s.at("epochs_done").get<int64_t>();
    (void)s.at("step").get<int64_t>();
    if (s.contains("checkpoint")) (void)s.at("checkpoint").at("files").at("model.safetensors").at("bytes").get<uint64_t>();
  } catch (const demi::Error&) {
  }
  return 0;
}

// Fuzz target: parse_checkpoint_state and parse_training_state, the checkpoint sidecar
// (state.json) that --resume reads before it trusts anything else. Every input must be accepted
// with every field the trainer reads present and well typed, or rejected with a demi::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "train/checkpoint.h"
#include "train/training_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::string name = "fuzz input";
    const nlohmann::json s =
        demi::train::parse_checkpoint_state(std::string(reinterpret_cast<const char*>(data), size), name);
    // The training fields come back typed: what the trainer reads cannot throw anything else.
    (void)demi::train::parse_training_state(s, name);
    if (s.contains("checkpoint")) (void)s.at("checkpoint").at("files").at("model.safetensors").at("bytes").get<uint64_t>();
  } catch (const demi::Error&) {
  }
  return 0;
}
